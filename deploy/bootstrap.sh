#!/usr/bin/env sh
# Creates .venv with the locked dependencies (uv.lock), using only the machine's python3.
# Sourced by run-demo.sh and run-tests.sh; safe to run again (a no-op when up to date).
# --inexact: installs what is missing and removes nothing, so starting the demo (runtime
# dependencies) does not take the dev tools away from a test run in another terminal.
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
UV_VERSION="0.13.9"
if [ ! -x .run/tools/bin/uv ]; then
  echo "bootstrap: installing uv $UV_VERSION into .run/tools" >&2
  "$PYTHON" -m venv .run/tools
  .run/tools/bin/python -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
.run/tools/bin/uv sync --inexact --quiet --frozen --python "$PYTHON" --extra local "$@"
