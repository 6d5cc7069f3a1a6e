#!/bin/sh
# Installs the Debian packages attnlab builds with, and the two data packages its tasks and tests
# read (fortunes: English text; dataset-fashion-mnist: images), and chromium (the headless-browser test of
# `attnlab viz` pages; libcpp-httplib-dev serves them with --serve), when any is missing. Runs apt-get directly
# as root, through sudo otherwise, and says what to run when neither is possible.
#   install-deps.sh        what `make demo` needs
#   install-deps.sh test   that, plus doxygen (the test api/docs_complete and `make docs`)
set -e
EXTRA=""
[ "$1" = test ] && EXTRA="doxygen"
PACKAGES="$EXTRA cmake g++ make libopenblas-dev libtbb-dev libfmt-dev libfftw3-dev pkgconf doctest-dev zlib1g-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libsqlite3-dev libpng-dev libcpp-httplib-dev chromium fortunes dataset-fashion-mnist"
missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "attnlab: installing missing Debian packages:$missing"
if [ "$(id -u)" = 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO="sudo"
else
  echo "attnlab: cannot install packages (not root, and no password-less sudo)." >&2
  echo "attnlab: run:  sudo apt-get install$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing
