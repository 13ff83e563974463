#!/usr/bin/env sh
# One command: install, start local Redis + Postgres (unless REDIS_URL / DATABASE_URL are set),
# migrate, load the demo inventory, print a demo API key with curl examples, and serve.
set -eu
cd "$(dirname "$0")/.."
sh deploy/bootstrap.sh
exec .venv/bin/bidder dev "$@"
