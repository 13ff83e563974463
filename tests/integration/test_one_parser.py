"""`bidder campaigns top-up` and `POST /admin/v1/campaigns/{id}/budget` read an amount with one
parser: what the API refuses the command refuses in the same words, what the API adds the
command adds. And the campaign commands never pass off an unreadable Redis as a null budget.

The expectations come from the README's description of the body: `add_cents` is "a JSON
number, or a string holding one as JSON writes it" (sign, digits, point, exponent), positive,
at most 6 decimals of a cent; the command passes its argument as that string.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from decimal import Decimal

import msgspec
import pytest

from store.local_servers import free_port
from tests.support.admin import ADMIN, Client, fetchval, parsed, started_client
from tests.support.cli import bidder, cli_env
from tests.support.factories import CAMPAIGN, basic_document, seed
from tests.support.servers import ServerUrls, wait_for_inventory

TOTAL = "SELECT budget_cents FROM campaigns WHERE id = $1"

REFUSED = [
    "1_0",  # Decimal() reads 10
    " 10 ",  # Decimal() reads 10
    "\u0661\u0660",  # Arabic-Indic "10"
    "\uff11\uff10",  # full-width "10"
    "abc",
    "NaN",
    "0",
    "-5",
    "0.0000001",  # a tenth of a micro-cent
    "9000000001",  # past the largest total
    "",
]
#: Numbers as JSON writes them, and the cents each means.
ACCEPTED = [("120.50", Decimal("120.50")), ("1e3", Decimal(1000)), ("0.000001", Decimal("1e-6"))]


@pytest.fixture
async def api(servers: ServerUrls, clean: None) -> AsyncIterator[Client]:
    await seed(servers.database_url, basic_document())
    async for client in started_client(servers):
        await wait_for_inventory(client)
        yield client


async def _api_top_up(api: Client, value: str) -> tuple[int, str | None]:
    response = await api.post(
        f"/admin/v1/campaigns/{CAMPAIGN}/budget",
        headers=ADMIN,
        content=msgspec.json.encode({"add_cents": value}),
    )
    return response.status_code, response.json().get("error")


async def _total(servers: ServerUrls) -> Decimal:
    total: Decimal = await fetchval(servers, TOTAL, uuid.UUID(CAMPAIGN))
    return total


@pytest.mark.parametrize("value", REFUSED)
async def test_the_command_refuses_what_the_api_refuses_in_the_same_words(
    servers: ServerUrls, api: Client, value: str
) -> None:
    before = await _total(servers)
    status, error = await _api_top_up(api, value)
    assert status == 400
    assert error
    done = await bidder(cli_env(servers), "campaigns", "top-up", CAMPAIGN, value)
    err = done.stderr.decode()
    assert done.returncode == 2, err  # a value the command cannot take, as a bad UUID
    assert err.rstrip().endswith(f"argument ADD_CENTS: {error}"), err
    assert "Traceback" not in err
    assert done.stdout == b""
    assert await _total(servers) == before


@pytest.mark.parametrize(("value", "cents"), ACCEPTED)
async def test_the_command_adds_what_the_api_adds(
    servers: ServerUrls, api: Client, value: str, cents: Decimal
) -> None:
    before = await _total(servers)
    status, _ = await _api_top_up(api, value)
    assert status == 200
    assert await _total(servers) == before + cents
    done = await bidder(cli_env(servers), "campaigns", "top-up", CAMPAIGN, value)
    assert done.returncode == 0, done.stderr
    assert parsed(done.stdout)["budget_cents"] == before + 2 * cents
    assert await _total(servers) == before + 2 * cents


@pytest.mark.parametrize("action", [("show",), ("top-up", "250")])
async def test_campaign_commands_with_redis_unreachable_fail_with_the_reason(
    servers: ServerUrls, clean: None, action: tuple[str, ...]
) -> None:
    """The admin API answers `budget` null with 200 while Redis cannot be read (the stored
    fields still help an operator); a command exits 1 and says why, so a script never reads a
    null budget as an answer. A top-up that cannot reach Redis adds nothing."""
    await seed(servers.database_url, basic_document())
    before = await _total(servers)
    closed = f"redis://127.0.0.1:{free_port()}/0"
    command, *rest = action
    done = await bidder(cli_env(servers, REDIS_URL=closed), "campaigns", command, CAMPAIGN, *rest)
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert done.stdout == b""  # no campaign with "budget": null
    reasons = [line for line in err.splitlines() if line.startswith("bidder: ")]
    assert len(reasons) == 1, err
    assert "cannot reach Redis at REDIS_URL" in reasons[0]
    assert "Traceback" not in err
    assert await _total(servers) == before
