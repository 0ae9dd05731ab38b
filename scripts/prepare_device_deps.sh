#!/usr/bin/env bash
# The GPU machine has no network and no GoogleTest: copy Debian's GoogleTest sources into .deps/
# (git-ignored), which the device tool carries (carry: [".deps"]) and scripts/device_check.sh uses.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d /usr/src/googletest ]; then
  apt-get update -qq && apt-get install -y -qq googletest >/dev/null
fi
mkdir -p .deps && rm -rf .deps/googletest && cp -r /usr/src/googletest .deps/googletest
echo "prepared .deps/googletest"
