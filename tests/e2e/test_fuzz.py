"""Hostile input, generated: a property-based fuzzer (hypothesis) against the real server
(`bidder serve`, one worker, real Redis and Postgres).

Every public route is called (the Core API's offers, answers, playout confirmations and screens
CRUD, the OpenRTB bid and loss notice, the tracking pixel, the admin API with and without its
token), each with generated path parameters (real ids, other publishers' ids, UUIDs, any text),
query strings (the routes' own parameters and others, repeated, any value), headers (no key,
a valid key, another publisher's, the admin token, two Authorization headers, any Content-Type,
any X-Request-ID) and bodies (the route's valid body with fields removed, replaced or added,
any JSON, JSON numbers past every range, duplicate keys, bytes that are no JSON). Real offers,
deals, a signed loss URL and signed tracking URLs are made first, so generated requests reach
past the id checks.

What must hold: no answer is a 5xx; every error is in its interface's documented shape (Core
and admin `{error}`, OpenRTB's error object under its prefix); the log holds no ERROR and no
traceback; and afterwards the record queue drains to zero and every campaign balances
(store.reconcile: reserved = its open offers, spent = its billing records, total = Postgres'
budget, remaining never negative).

Size: FUZZ_EXAMPLES requests (default 1,500: 10-35 s on a shared 2-core machine, plus about 20 s
to start the server and check), more with the environment
variable of that name.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import asyncpg
import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.invariants import wait_drained
from matching.snapshot import SHARDS
from store.hot import connect, tag
from store.reconcile import check_balances
from tests.support.admin import NEW_SCREEN
from tests.support.factories import (
    CAMPAIGN,
    PUB,
    PUB_OTHER,
    SCREEN_MOVING,
    basic_document,
    make_key,
    seed,
)
from tests.support.openrtb import bid_request
from tests.support.processes import free_port, start_serve, stop_serve, tail, until_ready
from tests.support.servers import ADMIN_TOKEN, ServerUrls, redis_mode

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1500"))
API = "/functions/v1/api"
RTB = "/functions/v1/openrtb-2-6"
OPENRTB_ERROR = {
    "error",
    "message",
    "details",
    "deprecated",
    "deprecation_message",
    "documentation",
    "migration_guide",
}
CORE_ERROR_KEYS = {"error", "status", "details", "problems"}


@dataclass
class World:
    """What the fuzzer aims at: the server, keys, and real ids and signed URLs."""

    base: str
    key: str
    other_key: str
    offers: list[str] = field(default_factory=list)
    deals: list[str] = field(default_factory=list)
    signed: list[str] = field(default_factory=list)  # a loss URL and tracking URLs, path+query
    sent: int = 0
    by_route: dict[str, int] = field(default_factory=dict)
    by_status: dict[int, int] = field(default_factory=dict)


# -- values ---------------------------------------------------------------------------------

#: JSON number texts no decoder range holds, placed raw into bodies.
_WILD_NUMBERS = [
    "1e1000000",
    "-1e1000000",
    "1E-400",
    "-0",
    "0.1234567890123456789",
    "123456789012345678901234567890",
    "9" * 5000,
    "1.5e308",
]
_text = st.text(max_size=24)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
    | st.sampled_from(_WILD_NUMBERS).map(lambda n: f"\x00raw:{n}")
    | st.sampled_from(["accept", "reject", "2026-11-27T12:00:00Z", "video/mp4", "moving", ""])
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


def _render(value: Any) -> bytes:
    """JSON text, with the raw number texts put in unquoted."""
    text = json.dumps(value)
    return re.sub(r'"\\u0000raw:([^"]*)"', r"\1", text).encode()


def _ids(world: World) -> st.SearchStrategy[str]:
    """A real id (the offers and deals grow as the fuzzer makes them: drawn by an index, so
    every draw has the same shape), a UUID, or any text."""

    def real(index: int) -> str:
        pool = [
            *world.offers,
            *world.deals,
            SCREEN_MOVING,
            CAMPAIGN,
            PUB,
            PUB_OTHER,
            "external-id",
            "ext-moving-1",
            "demo",
        ]
        return pool[index % len(pool)]

    return st.integers(0, 10**6).map(real) | st.uuids().map(str) | st.text(min_size=1, max_size=40)


# -- bodies ---------------------------------------------------------------------------------

_TEMPLATES: dict[str, Any] = {
    "answer": {"action": "accept", "accepted_price_cents": 2.5, "rejection_reason": "x"},
    "playout": {"played_at": "2026-11-27T12:00:00Z", "duration_seconds": 10, "completion_rate": 1},
    "screen": NEW_SCREEN,
    "bid": bid_request(),
    "budget": {"add_cents": 100},
    "key": {"expires_at": "2030-01-01T00:00:00Z"},
    "inventory": {"publishers": [], "screens": [], "campaigns": []},
    "loss": {"reason": 2},
}


@st.composite
def _mutated(draw: st.DrawFn, template: Any) -> Any:
    """`template` with up to three of its values (at any depth) removed, replaced or added."""
    value = json.loads(json.dumps(template))
    for _ in range(draw(st.integers(0, 3))):
        node = value
        while isinstance(node, dict | list) and node and draw(st.booleans()):
            child = (
                node[draw(st.sampled_from(sorted(node)))]
                if isinstance(node, dict)
                else node[draw(st.integers(0, len(node) - 1))]
            )
            if not isinstance(child, dict | list):
                break
            node = child
        if isinstance(node, dict):
            action = draw(st.sampled_from(["drop", "replace", "add"]))
            if action == "add" or not node:
                node[draw(_text)] = draw(_json)
            elif action == "drop":
                node.pop(draw(st.sampled_from(sorted(node))))
            else:
                node[draw(st.sampled_from(sorted(node)))] = draw(_json)
        elif isinstance(node, list):
            node.append(draw(_json))
    return value


@st.composite
def _body(draw: st.DrawFn, kind: str) -> bytes | None:
    choice = draw(st.sampled_from(["template", "template", "json", "bytes", "duplicate", "none"]))
    if choice == "none":
        return None
    if choice == "bytes":
        return draw(st.binary(max_size=64))
    if choice == "json":
        return _render(draw(_json))
    body = _render(draw(_mutated(_TEMPLATES[kind])))
    if choice == "duplicate" and body.startswith(b"{") and len(body) > 2:
        name = draw(st.sampled_from([*_TEMPLATES[kind], "x"]) if _TEMPLATES[kind] else _text)
        body = b"{" + json.dumps(name).encode() + b": " + _render(draw(_json)) + b", " + body[1:]
    return body


# -- requests -------------------------------------------------------------------------------


@dataclass
class Call:
    route: str
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes | None


_QUERY_NAMES = ["demo", "vast", "min_bid_cents", "limit", "cursor", "price", "aud", "x", ""]
_latin = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30).map(str.strip)


@st.composite
def _query(draw: st.DrawFn) -> str:
    pairs = draw(st.lists(st.tuples(st.sampled_from(_QUERY_NAMES) | _text, _text), max_size=4))
    return urlencode(pairs)


@st.composite
def _headers(draw: st.DrawFn, world: World, admin: bool) -> list[tuple[str, str]]:
    bearer = [f"Bearer {world.key}", f"Bearer {world.other_key}", f"Bearer {ADMIN_TOKEN}"]
    preferred = bearer[2] if admin else bearer[0]
    pick = draw(st.integers(0, 9))  # mostly the route's own credential
    if pick <= 5:
        auth = [preferred]
    elif pick == 9:
        auth = draw(st.lists(_latin, max_size=2))
    else:
        auth = [[], [bearer[1]], [preferred, bearer[2]]][pick - 6]
    headers = [("Authorization", value) for value in auth]
    content_type: str | None = "application/json"  # mostly what the routes take
    if draw(st.integers(0, 9)) >= 7:
        content_type = draw(st.sampled_from(["application/json; charset=utf-8", None]) | _latin)
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    if draw(st.booleans()):
        headers.append(
            (draw(st.sampled_from(["X-Request-ID", "Idempotency-Key", "X-Any"])), draw(_latin))
        )
    return headers


@st.composite
def _signed(draw: st.DrawFn, world: World, loss: bool) -> tuple[str, str]:
    """A signed loss (`loss`) or tracking URL as made, or with a parameter dropped, changed
    or added."""
    url = urlsplit(draw(st.sampled_from(world.signed[:1] if loss else world.signed[1:])))
    pairs = [tuple(p.split("=", 1)) if "=" in p else (p, "") for p in url.query.split("&")]
    action = draw(st.sampled_from(["keep", "keep", "drop", "change", "add"]))
    if action == "drop" and pairs:
        pairs.pop(draw(st.integers(0, len(pairs) - 1)))
    elif action == "change" and pairs:
        index = draw(st.integers(0, len(pairs) - 1))
        pairs[index] = (pairs[index][0], quote(draw(_text), safe=""))
    elif action == "add":
        pairs.append(
            (draw(st.sampled_from(["price", "aud", "event", "ts", "x"])), quote(draw(_text)))
        )
    return url.path, "&".join(f"{k}={v}" for k, v in pairs)


#: Route name: method, body kind ("" for none), path ({id}: a generated path parameter).
_ROUTES: dict[str, tuple[str, str, str]] = {
    "offer": ("GET", "", f"{API}/offers/request/{{id}}"),
    "offer_external": ("GET", "", f"{API}/offers/request/external-id/{{id}}"),
    "answer": ("POST", "answer", f"{API}/offers/response/{{id}}"),
    "playout": ("POST", "playout", f"{API}/playout/confirm/{{id}}"),
    "screens_list": ("GET", "", f"{API}/screens"),
    "screen_create": ("POST", "screen", f"{API}/screens"),
    "screen_get": ("GET", "", f"{API}/screens/{{id}}"),
    "screen_update": ("PATCH", "screen", f"{API}/screens/{{id}}"),
    "screen_delete": ("DELETE", "", f"{API}/screens/{{id}}"),
    "bid": ("POST", "bid", f"{RTB}/bid"),
    "bid_alias": ("POST", "bid", f"{RTB}/"),
    "loss": ("GET", "", ""),  # a signed URL, kept or altered
    "loss_post": ("POST", "loss", ""),
    "track": ("GET", "", ""),
    "admin_campaign": ("GET", "", "/admin/v1/campaigns/{id}"),
    "admin_budget": ("POST", "budget", "/admin/v1/campaigns/{id}/budget"),
    "admin_key_create": ("POST", "key", "/admin/v1/publishers/{id}/api-keys"),
    "admin_key_delete": ("DELETE", "", "/admin/v1/api-keys/{id}"),
    "admin_inventory_get": ("GET", "", "/admin/v1/inventory"),
    "admin_inventory_put": ("PUT", "inventory", "/admin/v1/inventory"),
    "admin_offer": ("GET", "", "/admin/v1/offers/{id}"),
    "admin_deal": ("GET", "", "/admin/v1/deals/{id}"),
    "earnings": ("GET", "", f"{API}/reports/earnings"),
    "admin_delivery": ("GET", "", "/admin/v1/reports/delivery"),
    "any_method": ("", "answer", ""),  # any method on a path of the service, or any path
}


@st.composite
def _call(draw: st.DrawFn, world: World) -> Call:
    route = draw(st.sampled_from(sorted(_ROUTES)))
    method, body_kind, template = _ROUTES[route]
    path = template.replace("{id}", quote(draw(_ids(world)), safe=""))
    query = draw(_query())
    if route.startswith(("loss", "track")):
        path, query = draw(_signed(world, route.startswith("loss")))
    elif route == "any_method":
        method = draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]))
        some = quote(draw(_ids(world)), safe="")
        path = draw(
            st.sampled_from(
                [f"{API}/screens/{some}", f"{RTB}/bid", f"{API}/offers/response/{some}"]
            )
            | st.text(max_size=30).map(lambda t: "/" + quote(t))
        )
    body = draw(_body(body_kind)) if body_kind else None
    headers = draw(_headers(world, route.startswith("admin")))
    return Call(route, method, path, query, headers, body)


# -- what every answer must be ----------------------------------------------------------------


def _check(call: Call, response: httpx.Response) -> None:
    said = f"{call.method} {call.path}?{call.query} -> {response.status_code} {response.text[:300]}"
    assert response.status_code < 500, said
    if response.status_code < 400:
        if response.headers.get("content-type", "").startswith("application/json"):
            json.loads(response.content)  # well-formed
        return
    body = json.loads(response.content)  # every error has a JSON body
    assert isinstance(body, dict), said
    openrtb = set(body) == OPENRTB_ERROR and isinstance(body["error"], str)
    core = set(body) <= CORE_ERROR_KEYS and isinstance(body.get("error"), str)
    if call.path.startswith(RTB):
        assert openrtb, said
    elif call.path.startswith("/functions/v1/track"):
        assert openrtb or core, said  # the pixel of an OpenRTB bid answers in that shape
    else:
        assert core, said


# -- the run --------------------------------------------------------------------------------


def _prepare(world: World) -> None:
    """Real offers and a deal (Core API), and a bid's signed loss and tracking URLs."""
    auth = {"Authorization": f"Bearer {world.key}"}
    with httpx.Client(base_url=world.base, timeout=10) as client:
        for _ in range(3):
            offer = client.get(f"{API}/offers/request/{SCREEN_MOVING}", headers=auth)
            assert offer.status_code == 200, offer.text
            world.offers.append(offer.json()["offer_id"])
        accepted = client.post(
            f"{API}/offers/response/{world.offers[0]}",
            json={"action": "accept", "accepted_price_cents": 2.5},
            headers=auth,
        )
        assert accepted.status_code == 200, accepted.text
        world.deals.append(accepted.json()["deal_id"])
        bid = client.post(f"{RTB}/bid", json=bid_request(), headers=auth)
        assert bid.status_code == 200, bid.text
        won = bid.json()["seatbid"][0]["bid"][0]
        world.offers.append(urlsplit(won["lurl"]).path.rsplit("/", 1)[-1])
        urls = [won["lurl"], *re.findall(r">(http[^<]*/track\?[^<]*)<", won["adm"])]
        world.signed = [
            f"{urlsplit(u).path}?{urlsplit(u).query}".replace("&amp;", "&") for u in urls
        ]
        assert len(world.signed) > 1, won["adm"]


def _remember(world: World, response: httpx.Response) -> None:
    """Offers and deals the fuzzer's own requests made: later requests aim at them."""
    if response.status_code != 200 or "json" not in response.headers.get("content-type", ""):
        return
    body = response.json()
    if isinstance(body, dict):
        for name, ids in (("offer_id", world.offers), ("deal_id", world.deals)):
            if isinstance(body.get(name), str) and len(ids) < 100:
                ids.append(body[name])


def _fuzz(world: World) -> None:
    client = httpx.Client(base_url=world.base, timeout=10)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def throw(data: st.DataObject) -> None:
        call = data.draw(_call(world))
        url = call.path + (f"?{call.query}" if call.query else "")
        response = client.request(call.method, url, headers=call.headers, content=call.body)
        world.sent += 1
        world.by_route[call.route] = world.by_route.get(call.route, 0) + 1
        world.by_status[response.status_code] = world.by_status.get(response.status_code, 0) + 1
        _check(call, response)
        _remember(world, response)

    try:
        throw()
    finally:
        client.close()


async def test_generated_requests_get_no_5xx_and_leave_every_campaign_balanced(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    await seed(servers.database_url, basic_document())
    world = World(
        "",
        await make_key(servers.database_url),
        await make_key(servers.database_url, PUB_OTHER),
    )
    port, log = free_port(), tmp_path / "serve.log"
    world.base = f"http://127.0.0.1:{port}"
    server = start_serve(servers, port, log, BODY_TIMEOUT_SECONDS="5")
    try:
        await until_ready(port, log)
        await asyncio.to_thread(_prepare, world)
        started = time.monotonic()
        await asyncio.to_thread(_fuzz, world)
        took = time.monotonic() - started
        print(f"fuzz: {world.sent} requests, {len(world.by_route)} routes, {took:.1f} s")
        print(f"fuzz: answers by status {dict(sorted(world.by_status.items()))}")

        redis = connect(servers.redis_url, timeout=5.0, mode=redis_mode(servers))
        try:
            drained, left, _ = await wait_drained(redis, 30)
            assert drained, f"{left} records still queued"
            conn = await asyncpg.connect(servers.database_url)
            try:
                report = await check_balances(redis, conn)
            finally:
                await conn.close()
            dead = [await redis.xlen(f"{tag(shard)}:dead") for shard in range(SHARDS)]
        finally:
            await redis.aclose()
        assert report.campaigns, "no campaign checked"
        assert not report.differing, report.render()
        print(f"fuzz: dead-lettered records {sum(dead)}")
        text = log.read_text(errors="replace")
        assert "Traceback" not in text, tail(log)
        assert '"level": "ERROR"' not in text, tail(log)
    finally:
        stop_serve(server)
