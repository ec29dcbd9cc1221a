#!/bin/bash
# The Python client's pytest suite against the consortd built by dune; ends
# with "N passed, M failed" (for scripts/test.sh).
set -u
cd "$(dirname "$0")"
py=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import pytest' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then echo "no python3 with pytest (make deps installs python3-pytest)"; echo "0 passed, 1 failed"; exit 1; fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest -q -p no:cacheprovider "$@" >"$out" 2>&1
rc=$?
cat "$out"
p=$(grep -Eo '[0-9]+ passed' "$out" | tail -1 | grep -Eo '^[0-9]+')
f=$(grep -Eo '[0-9]+ (failed|error)' "$out" | awk '{s+=$1} END {print s+0}')
p=${p:-0}
if [ "$rc" -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
# The package is typed: mypy --strict must accept it (python3-mypy, from make deps).
mypy=""
for m in "$py" python3 /usr/bin/python3; do
  if "$m" -c 'import mypy' 2>/dev/null; then mypy=$m; break; fi
done
if [ -n "$mypy" ] && "$mypy" -m mypy --strict --no-incremental --cache-dir=/dev/null consort_client; then
  p=$((p + 1))
else
  echo "mypy --strict consort_client failed (or python3-mypy is missing: make deps)"; f=$((f + 1))
fi
# The package as a user gets it: a wheel built from pyproject.toml (offline,
# with python3-setuptools and python3-wheel from make deps), installed in a
# fresh venv, imported from outside the source tree with its py.typed marker.
pyw=""
for m in /usr/bin/python3 "$py" python3; do
  if "$m" -c 'import setuptools, wheel, pip, venv' 2>/dev/null; then pyw=$m; break; fi
done
wdir=$(mktemp -d /tmp/consort-py.XXXXXX)
if [ -n "$pyw" ] &&
  "$pyw" -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$wdir/dist" . >"$wdir/log" 2>&1 &&
  "$pyw" -m venv "$wdir/venv" >>"$wdir/log" 2>&1 &&
  "$wdir/venv/bin/python" -m pip install -q --no-index --no-deps "$wdir"/dist/consort_client-*.whl >>"$wdir/log" 2>&1 &&
  (cd "$wdir" && PYTHONDONTWRITEBYTECODE=1 venv/bin/python -c '
import os, consort_client, consort_client.aio
from consort_client import Client, AsyncClient
d = os.path.dirname(consort_client.__file__)
assert "site-packages" in d, d
assert os.path.exists(os.path.join(d, "py.typed"))
print("installed", consort_client.__name__, "from", d)') >>"$wdir/log" 2>&1; then
  echo "ok the wheel builds offline from pyproject.toml, installs in a venv and imports (typed)"; p=$((p + 1))
else
  echo "not ok the wheel from pyproject.toml (python with setuptools, wheel, pip and venv: make deps)"
  cat "$wdir/log"; f=$((f + 1))
fi
rm -rf "$wdir" build consort_client.egg-info
echo "$p passed, $f failed"
[ "$f" = 0 ]
