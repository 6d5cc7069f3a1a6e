#!/bin/sh
# Tests the Debian package that `make package` wrote into BUILD_DIR (docs/testing.md, "The Debian
# package"):
#   1. its control fields: name, version, the -dev dependencies a consumer needs;
#   2. `dpkg -x` into a clean prefix: the binary, the headers, the libraries and the CMake package
#      files are there, and examples/own-project builds against that prefix alone and runs its
#      variant, experiment and sweep (tests/consumer/own_project.sh);
#   3. as root with apt-get: `apt-get install ./attnlab_*.deb` puts `attnlab` on the PATH and
#      find_package(attnlab) finds it without a prefix; then the package is removed again.
# Usage: test_package.sh BUILD_DIR
set -e
build=$(cd "${1:-build}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "test_package: $*" >&2; exit 1; }

set -- "$build"/attnlab_*.deb
[ $# = 1 ] && [ -f "$1" ] || fail "expected one attnlab_*.deb in $build (run make package), found: $*"
deb="$1"
echo "test_package: $deb"

# 1. control fields
dpkg-deb -f "$deb" Package | grep -qx attnlab || fail "Package is not attnlab"
depends=$(dpkg-deb -f "$deb" Depends)
for p in libopenblas-dev libtbb-dev libfmt-dev libfftw3-dev libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libsqlite3-dev libpng-dev zlib1g-dev; do
  echo "$depends" | grep -q "\\b$p\\b" || fail "Depends lacks $p: $depends"
done

# 2. unpacked into a clean prefix
work="$build/package_test"
rm -rf "$work"
mkdir -p "$work/root"
dpkg -x "$deb" "$work/root"
usr="$work/root/usr"
for f in bin/attnlab include/attnlab/attnlab.hpp include/attnlab/runner.hpp include/attnlab/cli.hpp \
         include/attnlab/tensor/tensor.hpp include/attnlab/nn/attention/registry.hpp \
         lib/libattnlab.a lib/cmake/attnlab/attnlabConfig.cmake lib/cmake/attnlab/attnlabTargets.cmake; do
  [ -e "$usr/$f" ] || fail "the package lacks /usr/$f"
done
"$usr/bin/attnlab" --help > "$work/help.txt" || fail "the packaged attnlab --help fails"
grep -q '^Subcommands:' "$work/help.txt" || fail "the packaged attnlab --help lists no subcommands"
ATTNLAB_PREFIX="$usr" sh "$src/tests/consumer/own_project.sh" "$src" "$work" Release

# 3. apt-get, as root
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
  if dpkg-query -W -f='${Status}' attnlab 2>/dev/null | grep -q "install ok installed"; then
    fail "a package attnlab is installed already: remove it first (apt-get remove attnlab)"
  fi
  trap 'apt-get remove -y -qq attnlab > /dev/null 2>&1 || true' EXIT
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" > "$work/apt.txt" 2>&1 || { cat "$work/apt.txt"; fail "apt-get install $deb fails"; }
  [ -x /usr/bin/attnlab ] || fail "apt-get install left no /usr/bin/attnlab"
  /usr/bin/attnlab --help > /dev/null || fail "the installed attnlab --help fails"
  mkdir -p "$work/apt"
  cmake -S "$src/examples/own-project" -B "$work/apt/build" -Dattnlab_DIR=/usr/lib/cmake/attnlab > "$work/apt/cmake.txt" 2>&1 \
    || { cat "$work/apt/cmake.txt"; fail "find_package(attnlab) does not find the installed package"; }
  cmake --build "$work/apt/build" -j 2 > "$work/apt/build.txt" 2>&1 || { tail -20 "$work/apt/build.txt"; fail "own-project does not build against /usr"; }
  "$work/apt/build/own" variants | grep -q '^cosine' || fail "own (against /usr) does not list cosine"
  apt-get remove -y -qq attnlab > /dev/null 2>&1 || fail "apt-get remove attnlab fails"
  trap - EXIT
  [ ! -e /usr/bin/attnlab ] || fail "/usr/bin/attnlab is left after apt-get remove"
  echo "test_package: apt-get install, build against /usr, apt-get remove ok"
else
  echo "test_package: not root (or no apt-get): apt-get install not tried"
fi
echo "test_package: ok"
