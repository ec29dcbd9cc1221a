#!/bin/bash
# Builds the C client and runs its tests under valgrind against a consortd
# (the one dune built, or $CONSORTD); ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
out=${1:-build}
root=$(cd ../.. && pwd)
consortd=${CONSORTD:-$root/_build/default/bin/consortd/consortd.exe}
if ! make -s OUT="$out" all >/dev/null; then echo "build failed"; echo "0 passed, 1 failed"; exit 1; fi
# The header, library and pkg-config file as a user sees them.
if ! PKG_CONFIG_PATH=$out pkg-config --exists consort-client; then echo "pkg-config cannot read consort-client.pc"; echo "0 passed, 1 failed"; exit 1; fi
dir=$(mktemp -d /tmp/consort-c.XXXXXX)
port=${C_TEST_PORT:-$((25000 + 10 * ($$ % 100)))}
"$consortd" --socket "$dir/d.sock" --bind 127.0.0.1:$port --ports 8 2>"$dir/daemon.err" &
pid=$!
# A second daemon, keyed, over TCP too: clients there need its token.
"$root/_build/default/bin/main.exe" keygen "$dir/k.key" >/dev/null && "$root/_build/default/bin/main.exe" keygen "$dir/t.token" >/dev/null
"$consortd" --socket "$dir/k.sock" --bind 127.0.0.1:$((port + 8)) --ports 2 --key "$dir/k.key" \
  --tcp 127.0.0.1:$((port + 9)) --token "$dir/t.token" 2>"$dir/daemon2.err" &
pid2=$!
trap 'kill $pid $pid2 2>/dev/null; wait $pid $pid2 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/d.sock" ] && [ -S "$dir/k.sock" ] && break; sleep 0.05; done
valgrind -q --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all --error-exitcode=99 \
  "$out/test_client" "$dir/d.sock" tcp:127.0.0.1:$((port + 9)) "$dir/t.token" >"$dir/out" 2>"$dir/vg"
rc=$?
cat "$dir/out"
p=$(grep -c '^ok ' "$dir/out")
f=$(grep -c '^not ok ' "$dir/out")
if [ -s "$dir/vg" ] || [ "$rc" = 99 ]; then
  echo "valgrind reports errors or leaks:"; cat "$dir/vg"; f=$((f + 1))
else
  echo "valgrind: no errors, no leaks"; p=$((p + 1))
fi
if [ "$rc" -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
# The README's example, as written, under valgrind too: its cast comes back.
valgrind -q --leak-check=full --errors-for-leak-kinds=all --error-exitcode=99 "$out/hello" "$dir/d.sock" >"$dir/hello.out" 2>"$dir/hello.vg"
rc=$?
if [ "$rc" = 0 ] && grep -q ': hello$' "$dir/hello.out" && [ ! -s "$dir/hello.vg" ]; then
  echo "ok README example (hello.c)"; p=$((p + 1))
else
  echo "not ok README example (hello.c): exit $rc"; cat "$dir/hello.out" "$dir/hello.vg"; f=$((f + 1))
fi
# Installed as a user installs it (make install), the README's example built
# with nothing but `pkg-config --cflags --libs consort-client`, and run as
# built: no LD_LIBRARY_PATH, no ldconfig (pkg-config's Libs carry the rpath).
if make -s OUT="$out" PREFIX="$dir/prefix" install >/dev/null 2>"$dir/install.err" &&
  flags=$(PKG_CONFIG_PATH="$dir/prefix/lib/pkgconfig" pkg-config --cflags --libs consort-client) &&
  ${CC:-cc} examples/hello.c $flags -o "$dir/hello-pc" 2>"$dir/cc.err" &&
  env -u LD_LIBRARY_PATH "$dir/hello-pc" "$dir/d.sock" >"$dir/hello-pc.out" 2>&1 &&
  grep -q ': hello$' "$dir/hello-pc.out"; then
  echo "ok hello.c built with pkg-config --cflags --libs consort-client from an installed prefix"; p=$((p + 1))
else
  echo "not ok hello.c built with pkg-config from an installed prefix"
  cat "$dir/install.err" "$dir/cc.err" "$dir/hello-pc.out" 2>/dev/null; f=$((f + 1))
fi
# The shared library is versioned: libconsort-client.so.MAJOR.MINOR.PATCH with
# the SONAME libconsort-client.so.MAJOR, and the two links to it.
soname=$(readelf -d "$dir/prefix/lib/libconsort-client.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = libconsort-client.so.0 ] && [ -f "$dir/prefix/lib/libconsort-client.so.0.1.0" ] &&
  [ "$(readlink "$dir/prefix/lib/libconsort-client.so.0")" = libconsort-client.so.0.1.0 ] &&
  [ "$(readlink "$dir/prefix/lib/libconsort-client.so")" = libconsort-client.so.0 ] &&
  readelf -d "$dir/hello-pc" 2>/dev/null | grep -q 'NEEDED.*\[libconsort-client.so.0\]'; then
  echo "ok the shared library has a SONAME and a versioned file name"; p=$((p + 1))
else
  echo "not ok the shared library's SONAME ($soname) and versioned file name"
  ls -l "$dir/prefix/lib"; f=$((f + 1))
fi
if ! kill -0 $pid 2>/dev/null; then echo "the daemon died"; f=$((f + 1)); fi
echo "$p passed, $f failed"
[ "$f" = 0 ]
