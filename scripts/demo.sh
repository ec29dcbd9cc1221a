#!/bin/sh
# The main job: see `consort demo --help`.
cd "$(dirname "$0")/.."
exec ./_build/default/bin/main.exe demo "$@"
