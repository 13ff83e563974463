#!/usr/bin/env sh
# One command: install (with the dev tools), then ruff, mypy (strict), the import contracts
# (lint-imports, [tool.importlinter] in pyproject.toml) and the whole test suite against real
# Redis and Postgres (started by the test session unless REDIS_URL / DATABASE_URL
# are set). Any failure fails the command.
set -eu
cd "$(dirname "$0")/.."
sh deploy/bootstrap.sh --group dev
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports
.venv/bin/pytest "$@"
