#!/bin/sh
# Installs ocamlformat (the version pinned in .ocamlformat) under _tools/ when missing, and prints
# the directory to put first on PATH. Debian 12 has no ocamlformat package; Debian 13's binary
# package needs a newer C library, so both come from Debian 13 through apt (signatures checked
# against the Debian archive keyring) into _tools/ocamlformat, and a wrapper runs the binary with
# that C library's loader. Nothing outside _tools/ is touched.
set -e
cd "$(dirname "$0")/.."
want=$(sed -n 's/^version *= *//p' .ocamlformat)
T=$PWD/_tools/ocamlformat
if [ -x "$T/bin/ocamlformat" ] && [ "$("$T/bin/ocamlformat" --version 2>/dev/null)" = "$want" ]; then
  echo "$T/bin"; exit 0
fi
case "$(uname -m)" in
  x86_64) arch=amd64; triple=x86_64-linux-gnu; loader=ld-linux-x86-64.so.2 ;;
  *) echo "ocamlformat.sh: no ocamlformat for $(uname -m) here; install ocamlformat $want and put it on PATH" >&2; exit 1 ;;
esac
if command -v ocamlformat >/dev/null 2>&1 && [ "$(ocamlformat --version)" = "$want" ]; then
  dirname "$(command -v ocamlformat)"; exit 0
fi
rm -rf "$T"
A=$T/apt
mkdir -p "$A/state/lists/partial" "$A/cache/archives/partial" "$T/deb" "$T/bin"
touch "$A/state/status"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" > "$A/sources.list"
set -- -o Dir::Etc::SourceList="$A/sources.list" -o Dir::Etc::SourceParts=/dev/null \
  -o Dir::State="$A/state" -o Dir::State::status="$A/state/status" -o Dir::Cache="$A/cache" \
  -o Debug::NoLocking=1 -o APT::Architecture=$arch -o APT::Sandbox::User=root
echo "ocamlformat.sh: fetching ocamlformat $want and its C library from Debian 13" >&2
apt-get "$@" -qq update >&2
(cd "$T/deb" && apt-get "$@" -qq download ocamlformat libc6 >&2)
for d in "$T"/deb/*.deb; do dpkg-deb -x "$d" "$T/root"; done
lib=$T/root/usr/lib/$triple
cat > "$T/bin/ocamlformat" <<EOS
#!/bin/sh
exec "$lib/$loader" --library-path "$lib:/lib/$triple:/usr/lib/$triple" "$T/root/usr/bin/ocamlformat" "\$@"
EOS
chmod +x "$T/bin/ocamlformat"
got=$("$T/bin/ocamlformat" --version)
if [ "$got" != "$want" ]; then
  echo "ocamlformat.sh: Debian 13 has ocamlformat $got, .ocamlformat asks for $want" >&2; exit 1
fi
echo "$T/bin"
