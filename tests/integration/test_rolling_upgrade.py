"""Rolling upgrades (docs/operations.md, "Rolling upgrades"): every migration only expands the
schema, so the release still running keeps working while the next one's migration Job has
already run.

Two checks: each migration file, parsed by Postgres' own parser (pglast), holds only additive
statements; and the previous release (the code just before the newest migration was added,
from git) passes its own hot-route tests against a database migrated by this release."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from pglast import ast as pg
from pglast import parse_sql
from pglast.enums import AlterTableType, ConstrType

from store.postgres import migrate, migration_files
from tests.support.paths import STANDARDS
from tests.support.servers import ServerUrls

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "store" / "migrations"
#: The previous release's tests of the hot routes and of the records they write.
PREVIOUS_TESTS = [
    "tests/integration/test_core_budget.py",
    "tests/integration/test_openrtb_bid.py",
    "tests/integration/test_records.py",
]
#: Statements that only add: tables, indexes, rows (seed data, backfills), functions, comments,
#: triggers (which keep new tables in step with the old ones' writes, whoever writes them: the
#: previous release's tests below run with them firing).
ADDITIVE_STATEMENTS = (
    pg.CreateStmt,
    pg.IndexStmt,
    pg.InsertStmt,
    pg.UpdateStmt,
    pg.CreateFunctionStmt,
    pg.CommentStmt,
    pg.CreateTrigStmt,
)
#: Column types every older value and every older writer's value fits (a widening): `json`
#: keeps any `jsonb` value as its text, and takes a `jsonb` parameter by assignment.
WIDENED_TO = {"numeric", "text", "json"}


def non_additive(sql: str) -> list[str]:
    """What in `sql` could break code written for the schema before it: drops, renames,
    truncations, deletions, a new NOT NULL column without a default, a column made NOT NULL,
    a constraint added to an existing table, a column type narrowed or changed."""
    problems = []
    for raw in parse_sql(sql):
        stmt: Any = raw.stmt
        if isinstance(stmt, ADDITIVE_STATEMENTS):
            continue
        if not isinstance(stmt, pg.AlterTableStmt):
            problems.append(type(stmt).__name__)
            continue
        table = getattr(stmt.relation, "relname", "?")
        for cmd in stmt.cmds or ():
            problems += [f"ALTER TABLE {table}: {p}" for p in _alter(cmd)]
    return problems


def _alter(cmd: Any) -> list[str]:
    """The problems of one ALTER TABLE command (a pglast AlterTableCmd)."""
    kind = cmd.subtype
    if kind == AlterTableType.AT_AddColumn:
        constraints = {c.contype for c in cmd.def_.constraints or ()}
        if (
            ConstrType.CONSTR_NOTNULL in constraints
            and ConstrType.CONSTR_DEFAULT not in constraints
        ):
            return [f"column {cmd.def_.colname} NOT NULL without a default"]
        return []
    if kind in (AlterTableType.AT_ColumnDefault, AlterTableType.AT_DropNotNull):
        return []
    if kind == AlterTableType.AT_AlterColumnType:
        names = [n.sval for n in cmd.def_.typeName.names]
        using = cmd.def_.raw_default
        if (
            names[-1] in WIDENED_TO
            and not cmd.def_.typeName.typmods
            and (using is None or _casts_itself(using, cmd.name, names[-1]))
        ):
            return []
        return [f"column {cmd.name} changes type to {'.'.join(names)}"]
    return [kind.name]


def _casts_itself(using: Any, column: str, type_name: str) -> bool:
    """Whether a USING clause is the column itself cast to the new type (`body::json`): the
    conversion a widening makes anyway, not a rewrite of the values."""
    if not isinstance(using, pg.TypeCast) or not isinstance(using.arg, pg.ColumnRef):
        return False
    fields = [getattr(f, "sval", None) for f in using.arg.fields or ()]
    names = (using.typeName.names or ()) if using.typeName is not None else ()
    return fields == [column] and bool(names) and names[-1].sval == type_name


def test_every_migration_only_adds() -> None:
    files = sorted(MIGRATIONS.glob("*.sql"))
    assert [f.name for f in files] == [name for name, _ in migration_files()]
    for path in files:
        assert not non_additive(path.read_text()), f"{path.name}: {non_additive(path.read_text())}"


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE offers DROP COLUMN audience;",
        "DROP TABLE offers;",
        "ALTER TABLE offers RENAME COLUMN audience TO reach;",
        "ALTER TABLE offers ADD COLUMN reach integer NOT NULL;",
        "ALTER TABLE offers ALTER COLUMN audience SET NOT NULL;",
        "ALTER TABLE offers ALTER COLUMN audience TYPE integer;",
        "ALTER TABLE offers ALTER COLUMN audience TYPE numeric(6, 2);",
        "ALTER TABLE offers ALTER COLUMN audience TYPE numeric USING audience * 100;",
        "ALTER TABLE offers ADD CONSTRAINT positive CHECK (audience > 0);",
        "TRUNCATE offers;",
        "DELETE FROM offers;",
    ],
)
def test_the_rule_refuses_what_breaks_running_code(sql: str) -> None:
    assert non_additive(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE t (id uuid PRIMARY KEY, v text NOT NULL);",
        "ALTER TABLE offers ADD COLUMN reach integer;",
        "ALTER TABLE offers ADD COLUMN reach integer NOT NULL DEFAULT 0;",
        "CREATE INDEX offers_reach ON offers (audience);",
        "ALTER TABLE offers ALTER COLUMN audience TYPE numeric;",
        "ALTER TABLE loss_notices ALTER COLUMN body TYPE json;",
        "ALTER TABLE loss_notices ALTER COLUMN body TYPE json USING body::json;",
    ],
)
def test_the_rule_accepts_what_expands(sql: str) -> None:
    assert not non_additive(sql)


def _previous_release() -> str:
    """The commit before the newest migration reached this branch: the release that runs while
    the next one's migration has been applied. Along first parents, so that a migration a
    merge brings names the merge, and its first parent is the release before it."""
    newest = migration_files()[-1][0]
    try:
        added = subprocess.run(
            [
                "git",
                "log",
                "--first-parent",
                "-m",
                "--diff-filter=A",
                "--format=%H",
                "--",
                f"store/migrations/{newest}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history here: the previous release cannot be checked out")
    if not added:
        pytest.skip(f"{newest} is not committed yet")
    return f"{added[-1]}^1"


def _checkout(revision: str, into: Path) -> None:
    archive = subprocess.run(
        [
            "git",
            "archive",
            "--format=tar",
            revision,
            "bidder",
            "matching",
            "store",
            "tests",
            "pyproject.toml",
        ],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def _database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def _new_schema(servers: ServerUrls) -> str:
    """A database of the test's own with this release's schema, applied by its migrate (what
    the migration Job runs)."""
    admin = await asyncpg.connect(servers.database_url)
    try:
        await admin.execute("DROP DATABASE IF EXISTS previous_release WITH (FORCE)")
        await admin.execute("CREATE DATABASE previous_release")
    finally:
        await admin.close()
    database_url = _database(servers.database_url, "previous_release")
    conn = await asyncpg.connect(database_url)
    try:
        assert await migrate(conn) == [name for name, _ in migration_files()]
    finally:
        await conn.close()
    return database_url


def test_the_previous_release_serves_the_hot_routes_on_the_new_schema(
    servers: ServerUrls, tmp_path: Path
) -> None:
    revision = _previous_release()
    previous = tmp_path / "previous"
    _checkout(revision, previous)
    if not (previous / "tests" / "standards").exists():
        # A release whose tests read the standards' schemas from a reference folder beside
        # the checkout gets this repository's copy there.
        shutil.copytree(STANDARDS, tmp_path / "shared" / "reference")
    database_url = asyncio.run(_new_schema(servers))
    env = {
        **os.environ,
        "PYTHONPATH": str(previous),  # the previous release's packages before the installed
        "DATABASE_URL": database_url,
        "REDIS_URL": servers.redis_url,
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *PREVIOUS_TESTS],
        cwd=previous,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    tail = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0, tail
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed is not None, tail
    assert int(passed.group(1)) >= 30, tail
    shutil.rmtree(previous, ignore_errors=True)
