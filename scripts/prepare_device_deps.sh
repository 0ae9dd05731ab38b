#!/usr/bin/env bash
# The GPU machine has no network and no GoogleTest. This prepares .deps/ (git-ignored), which the
# device tool carries (carry: [".deps"]) and scripts/device_check.sh uses:
#   .deps/googletest  Debian's GoogleTest sources (the GPU tests build them);
#   .deps/wheels      the Python package's build requirements (scikit-build-core, nanobind and what
#                     they need), for `pip install --no-build-isolation` there (step "pytest").
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d /usr/src/googletest ]; then
  apt-get update -qq && apt-get install -y -qq googletest >/dev/null
fi
mkdir -p .deps && rm -rf .deps/googletest && cp -r /usr/src/googletest .deps/googletest
echo "prepared .deps/googletest"
python=${PYTHON:-python3}
rm -rf .deps/wheels
"$python" -m pip download -q --no-deps --only-binary=:all: -d .deps/wheels \
  "scikit-build-core>=0.10" "nanobind>=2.0" pathspec packaging pytest iniconfig pluggy pygments
echo "prepared .deps/wheels: $(ls .deps/wheels | tr '\n' ' ')"
