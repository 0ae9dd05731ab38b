#!/usr/bin/env bash
# The SASS of every kernel of the library, one line a kernel: an md5 of its instructions and its
# name (the anonymous namespace's per-file hash masked), from the objects of a CMake build. Any
# change to a kernel's code moves its timing (docs/perf-notes.md, "Lessons"), so a change meant to
# leave the kernels alone (a refactor, host code) is checked by comparing two fingerprints, and a
# tree whose fingerprint equals docs/validated-sass.txt runs kernels the GPU has validated.
#   scripts/sass_fingerprint.sh [BUILD_DIR]           (default: build; needs a CUDA build)
#   scripts/sass_fingerprint.sh --check [BUILD_DIR]   (against docs/validated-sass.txt: exit 0 when
#                                                     every kernel is as validated, else the diff)
#   scripts/sass_fingerprint.sh --sizes [BUILD_DIR]   (each kernel's instructions, registers and stack
#                                                     frame, which spills grow: a change's code size
#                                                     beside main's)
# Only the lines after the header compare across machines with the same nvcc: another compiler
# version gives other SASS. cuobjdump (and the nvdisasm it runs) come from the CUDA toolkit, or else
# from PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, installed into build-tools/ (ignored
# by git) on first use.
set -euo pipefail
check=0 sizes=0
[ "${1:-}" == "--check" ] && { check=1; shift; }
[ "${1:-}" == "--sizes" ] && { sizes=1; shift; }
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $check == 1 ]; then
  validated="$root/docs/validated-sass.txt"
  now=$("$0" "$build")
  if diff <(grep -v '^#' "$validated") <(grep -v '^#' <<<"$now"); then
    echo "sass_fingerprint: every kernel as in docs/validated-sass.txt"
  else
    echo "sass_fingerprint: kernels differ from docs/validated-sass.txt ($(head -1 <<<"$now" | cut -c3-);" \
      "validated: $(grep -o 'nvcc V[0-9.]*' "$validated" | head -1))"
    exit 1
  fi
  exit 0
fi
objs=$(find "$build/src" -path '*cuda/*.cu.o' 2>/dev/null | sort)
[ -n "$objs" ] || { echo "sass_fingerprint: no CUDA objects under $build/src (a build with nvcc first)" >&2; exit 1; }
cuobjdump=""
for c in "$(command -v cuobjdump || true)" /usr/local/cuda/bin/cuobjdump "$root"/build-tools/nvidia/cu*/bin/cuobjdump; do
  [ -z "$cuobjdump" ] && [ -x "$c" ] && [ -x "$(dirname "$c")/nvdisasm" ] && cuobjdump=$c
done
if [ -z "$cuobjdump" ]; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$root/build-tools" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >&2
  cuobjdump=$(ls "$root"/build-tools/nvidia/cu*/bin/cuobjdump | head -1)
  chmod +x "$cuobjdump" "$(dirname "$cuobjdump")/nvdisasm"
fi
export PATH="$(dirname "$cuobjdump"):$PATH"  # cuobjdump -sass runs nvdisasm
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
nvcc_version=$("$nvcc" --version 2>/dev/null | grep -o 'V[0-9][0-9.]*' | head -1 || echo unknown)
if [ $sizes == 1 ]; then
  echo "# kernel sizes: nvcc ${nvcc_version}, $(echo "$objs" | wc -l) objects of $build"
  echo "# instructions registers stack name"
  for o in $objs; do
    { "$cuobjdump" -sass "$o"; echo "@@res-usage"; "$cuobjdump" -res-usage "$o"; } | python3 -c '
import re, sys
anon = re.compile(r"_GLOBAL__N__[0-9a-f]+_[0-9]+_\w+?_[0-9a-f]{8}")
count, usage, name, res = {}, {}, None, False
for line in sys.stdin:
    if line.startswith("@@res-usage"):
        res = True
        continue
    m = re.match(r"\s*Function\s*:?\s*(\S+?):?$", line.rstrip())
    if m:
        name = anon.sub("ANON", m.group(1))
        continue
    if name is None:
        continue
    if not res and re.match(r"\s+/\*[0-9a-f]+\*/", line):
        count[name] = count.get(name, 0) + 1
    elif res and "REG:" in line:
        f = dict(kv.split(":", 1) for kv in line.split() if ":" in kv)
        usage[name] = (f.get("REG", "?"), f.get("STACK", "?"))
for n in sorted(count):
    reg, stack = usage.get(n, ("?", "?"))
    print(count[n], reg, stack, n)
'
  done | sort -k4
  exit 0
fi
echo "# sass fingerprint: nvcc ${nvcc_version}, $(echo "$objs" | wc -l) objects of $build"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for o in $objs; do
  # Straight from cuobjdump: a command substitution would strip the trailing blank lines that every
  # other function's text ends with, so that the last kernel of an object would hash differently
  # from the same kernel elsewhere (moving a kernel to another file moved its line).
  "$cuobjdump" -sass "$o" > "$tmp" || { echo "sass_fingerprint: cuobjdump failed on $o" >&2; exit 1; }
  python3 -c '
import hashlib, re, sys
anon = re.compile(r"_GLOBAL__N__[0-9a-f]+_[0-9]+_\w+?_[0-9a-f]{8}")
name, body = None, []
def flush():
    if name:
        print(hashlib.md5("".join(body).encode()).hexdigest()[:12], name)
for line in sys.stdin:
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        flush()
        name, body = anon.sub("ANON", m.group(1)), []
    elif name:
        body.append(anon.sub("ANON", line))
flush()
' < "$tmp"
done | sort -k2
