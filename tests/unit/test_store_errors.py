"""The outage tuples of store.errors cover what their docstrings say: a Redis that cannot be
reached or answers too late, a Postgres out of reach or failing a statement, a driver call on a
closed pool, and nothing that is a bug of the caller's own."""

from __future__ import annotations

import asyncpg
import pytest
from redis import exceptions as redis_errors

import store
from store.errors import OUTAGE, POSTGRES_CLOSED, POSTGRES_DOWN, POSTGRES_UNREACHABLE, REDIS_DOWN


def _caught(tuple_: tuple[type[Exception], ...], exc: Exception) -> bool:
    try:
        raise exc
    except tuple_:
        return True
    except Exception:
        return False


@pytest.mark.parametrize(
    "exc",
    [
        redis_errors.ConnectionError("refused"),
        redis_errors.TimeoutError("late"),
        redis_errors.ResponseError("NOSCRIPT"),
        redis_errors.RedisClusterException("Redis Cluster cannot be connected"),
        redis_errors.SlotNotCoveredError("no primary serves slot 12"),
        ConnectionRefusedError(111, "refused"),
        TimeoutError(),  # asyncio.timeout and socket timeouts
    ],
)
def test_redis_down_covers_an_unreachable_or_slow_redis(exc: Exception) -> None:
    assert _caught(REDIS_DOWN, exc)
    assert _caught(OUTAGE, exc)


@pytest.mark.parametrize("exc", [ValueError("bug"), KeyError("bug"), asyncpg.InterfaceError("x")])
def test_redis_down_leaves_the_callers_own_errors(exc: Exception) -> None:
    assert not _caught(REDIS_DOWN, exc)


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionResetError(104, "reset"),
        TimeoutError(),
        asyncpg.ConnectionDoesNotExistError("gone"),
        asyncpg.CannotConnectNowError("starting up"),
        asyncpg.PostgresConnectionError("refused"),
    ],
)
def test_an_unreachable_postgres_is_down_and_an_outage(exc: Exception) -> None:
    assert _caught(POSTGRES_UNREACHABLE, exc)
    assert _caught(POSTGRES_DOWN, exc)
    assert _caught(OUTAGE, exc)


def test_a_failing_statement_is_down_but_not_unreachable() -> None:
    shutdown = asyncpg.exceptions.AdminShutdownError("terminating connection")
    assert _caught(POSTGRES_DOWN, shutdown)
    assert _caught(OUTAGE, shutdown)
    query = asyncpg.exceptions.UndefinedTableError("no such table")
    assert _caught(POSTGRES_DOWN, query)
    assert not _caught(POSTGRES_UNREACHABLE, query)


def test_a_closed_pool_is_named_apart() -> None:
    closed = asyncpg.InterfaceError("pool is closing")
    assert _caught(POSTGRES_CLOSED, closed)
    assert not _caught(POSTGRES_DOWN, closed)
    assert not _caught(OUTAGE, closed)


def test_the_package_exports_them() -> None:
    assert {
        "REDIS_DOWN",
        "POSTGRES_DOWN",
        "POSTGRES_UNREACHABLE",
        "POSTGRES_CLOSED",
        "OUTAGE",
    } <= set(store.__all__)
    assert store.REDIS_DOWN is REDIS_DOWN
