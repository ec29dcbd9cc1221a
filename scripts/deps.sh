#!/bin/sh
# Installs the Debian packages Consort needs to build and test, only those missing.
set -e
PKGS="ocaml-nox ocaml-findlib dune libcmdliner-ocaml-dev libcstruct-ocaml-dev \
libalcotest-ocaml-dev libqcheck-ocaml-dev libcrowbar-ocaml-dev libfmt-ocaml-dev libparsexp-ocaml-dev \
liblogs-ocaml-dev libmtime-ocaml-dev libsha-ocaml-dev gcc make iproute2 \
libmirage-crypto-ocaml-dev libbase64-ocaml-dev libeqaf-ocaml-dev \
util-linux mount libyojson-ocaml-dev tcpdump ocaml-odoc \
valgrind pkg-config python3 python3-pytest python3-mypy python3-pip python3-setuptools \
python3-wheel python3-venv libssl-dev chromium"
missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  echo "deps: installing$missing"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# Go, for the Go client (clients/go, standard library only): Debian's golang-go when no Go
# toolchain is found (a Go already installed, on PATH or in /usr/local/go, is used as it is).
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ] && [ ! -x /usr/lib/go/bin/go ]; then
  echo "deps: installing golang-go"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends golang-go >/dev/null
fi
# The user the process server runs programs as (consort cap proc serve --user): a system
# user with no home and no login, made once.
if ! getent passwd consort-run >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v useradd >/dev/null 2>&1; then
    echo "deps: creating the system user consort-run"
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
      --user-group consort-run || echo "deps: could not create the user consort-run"
  else
    echo "deps: no user consort-run (as root: useradd --system --no-create-home --shell /usr/sbin/nologin consort-run)"
  fi
fi
