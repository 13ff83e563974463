"""Fixtures of the unit tests: none start a server. A unit test that asks for the session's
servers (directly or through `clean`) fails here with a pointer to the integration layer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def servers() -> None:
    pytest.fail(
        "unit tests run without Redis or Postgres: a test on servers is in tests/integration"
    )
