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
# The same integration tests of the Core API, OpenRTB, records and the cluster's faults against a
# local Redis Cluster (three primaries, a replica each), when the whole suite ran.
if [ "$#" -eq 0 ]; then
    .venv/bin/pytest --redis=cluster -q tests/integration/test_core_api.py \
        tests/integration/test_openrtb_bid.py tests/integration/test_openrtb_loss.py \
        tests/integration/test_records.py tests/integration/test_tracking.py \
        tests/integration/test_core_budget.py tests/integration/test_cluster.py \
        tests/integration/test_budget_slices.py tests/e2e/test_two_instances.py
fi
