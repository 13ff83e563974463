"""The JSON log during a Postgres outage: asyncpg's pool warns on every failed reconnect with a
whole traceback; the line keeps the error and drops the traceback. Unexpected errors keep
theirs."""

from __future__ import annotations

import io
import json
import logging

import asyncpg

from bidder.observability import JsonFormatter, WithoutOutageTracebacks


def _logged(level: int, exc: BaseException) -> dict[str, object]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(WithoutOutageTracebacks())
    logger = logging.getLogger(f"test.outage.{id(out)}")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        raise exc
    except BaseException:
        logger.log(level, "Failed to restore the pool connection floor; retrying", exc_info=True)
    finally:
        logger.removeHandler(handler)
    line: dict[str, object] = json.loads(out.getvalue())
    return line


def test_an_outage_warning_keeps_the_error_and_drops_the_traceback() -> None:
    for exc in (
        ConnectionRefusedError(111, "Connection refused"),
        asyncpg.CannotConnectNowError("the database system is shutting down"),
    ):
        line = _logged(logging.WARNING, exc)
        assert "exception" not in line
        assert line["error"] == f"{type(exc).__name__}: {exc}"


def test_an_unexpected_error_keeps_its_traceback() -> None:
    for level, exc in (
        (logging.WARNING, ValueError("bad value")),
        (logging.ERROR, ConnectionRefusedError(111, "Connection refused")),
    ):
        line = _logged(level, exc)
        assert "Traceback" in str(line["exception"])
