"""Fixtures common to every layer that runs on servers: the session's real Redis and Postgres,
started once per session in a temporary folder (or taken from REDIS_URL / DATABASE_URL), and the
clean slate each such test starts from. The integration and end-to-end tests both use them; they
sit here, not in each layer's conftest, so that a run of both layers starts one pair of servers.
Each layer's own fixtures are in its conftest; helpers are in `tests/support/`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import ServerUrls, empty_servers, migrate_database, session_servers


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis",
        choices=("single", "cluster"),
        default="single",
        help="the Redis the session starts: one server, or a local Redis Cluster (three "
        "primaries with a replica each) the app speaks to with REDIS_MODE=cluster",
    )


@pytest.fixture(scope="session")
def servers(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerUrls]:
    cluster = request.config.getoption("--redis") == "cluster"
    with session_servers(Path(tmp_path_factory.mktemp("servers")), cluster=cluster) as urls:
        yield urls


@pytest.fixture(scope="session")
async def migrated(servers: ServerUrls) -> str:
    await migrate_database(servers.database_url)
    return servers.database_url


@pytest.fixture
async def clean(servers: ServerUrls, migrated: str) -> None:
    """Empty Redis and every table, so the test starts from nothing."""
    await empty_servers(servers)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Against a Redis Cluster, redis-py's cluster client can leave a node's socket, the
    connection holding it, or the node object holding that, for the garbage collector (a node
    killed or a slot moved under it, a burst of concurrent calls on one node), whose
    ResourceWarning would fail whichever test runs when it is collected; the service's own
    connections are closed by their tests' assertions."""
    if config.getoption("--redis") == "cluster":
        for item in items:
            item.add_marker(
                pytest.mark.filterwarnings("ignore:unclosed <StreamWriter:ResourceWarning")
            )
            item.add_marker(
                pytest.mark.filterwarnings(
                    "ignore:unclosed Connection <redis.asyncio.connection:ResourceWarning"
                )
            )
            item.add_marker(
                pytest.mark.filterwarnings("ignore:Unclosed ClusterNode object:ResourceWarning")
            )
