# Sourced by the device scripts (device_check.sh, ncu_source.sh, stage1_variants.sh, timeline.sh).
#   device_setup NAME ARCHIVE: makes $OUT (the device tool's output folder, or ./out); empties the
#   log folder L=/tmp/NAME and packs it into $OUT/ARCHIVE when the script exits (the device tool
#   returns only a few files); sets gtest to the CMake argument for the carried GoogleTest sources.
device_setup() {
  OUT=${OUT:-$PWD/out}
  mkdir -p "$OUT"
  L=/tmp/$1
  rm -rf "$L" && mkdir -p "$L"
  trap "tar czf '$OUT/$2' -C /tmp '$1'" EXIT
  gtest=()
  [ -d .deps/googletest ] && gtest=(-DSONIC_GTEST_SOURCE_DIR="$PWD/.deps/googletest")
}
