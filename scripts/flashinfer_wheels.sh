#!/usr/bin/env bash
# Fetches, on this machine (which reaches PyPI), the wheels that carry FlashInfer to the GPU machine
# (which cannot): flashinfer-python and the packages it needs that the GPU machine's image lacks
# (KINDS.md lists the image's packages). They land in .whl/ (ignored by git), about 22 MB; a device
# call names .whl in its carry and device_env.sh installs them. flashinfer-python 0.6.0 is the
# newest release that fits the device tool's 64 MiB carry (0.7.4's wheel is 101 MB); it compiles its
# kernels on first use (JIT, nvcc on the GPU machine).
# nvidia-cutlass-dsl, which it names too, is left out: its sampling and top-k paths do not use it.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
for pkg in flashinfer-python==0.6.0 apache-tvm-ffi==0.1.15 nvidia-cudnn-frontend==1.32.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$pkg"
done
ls -la .whl
