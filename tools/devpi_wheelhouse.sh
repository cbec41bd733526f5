#!/usr/bin/env bash
# devpi-server's wheels, for the tests of the fleet cache (tests/system/test_devpi.py and the
# molecule scenario 'cache'): downloaded once into build/wheelhouse/devpi by pip, the ordinary
# client, from the package index it is configured with, checked against the hashes of the
# engine_cache role's lock (roles/engine_cache/files/devpi-server.txt). Again only when that lock
# changes. Prints the directory.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$repo/.venv}
wheelhouse=$repo/build/wheelhouse/devpi
lock=$repo/roles/engine_cache/files/devpi-server.txt
stamp=$wheelhouse/.lock-sha256
want=$(sha256sum "$lock" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$wheelhouse"
  mkdir -p "$wheelhouse"
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    --require-hashes -r "$lock" -d "$wheelhouse" >&2
  echo "$want" >"$stamp"
fi
echo "$wheelhouse"
