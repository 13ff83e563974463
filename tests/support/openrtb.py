"""Shared by the OpenRTB bridge tests: the bridge's paths, a valid BidRequest, settings that keep
the queued records, the deprecation and error checks, the IAB schema validation, the queued
records and the loss and tracking URLs as an SSP calls them."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jsonschema
from redis.asyncio import Redis
from referencing import Registry, Resource

from bidder.settings import Settings
from store.hot import queue_keys
from tests.support import factories as f
from tests.support.core import Live
from tests.support.paths import OPENRTB_SCHEMAS
from tests.support.servers import ServerUrls, make_settings
from tests.support.vast_check import assert_valid_vast

BID = "/functions/v1/openrtb-2-6/bid"


ROOT = "/functions/v1/openrtb-2-6/"


SCHEMA_DIR = OPENRTB_SCHEMAS


NS = {"v": "http://www.iab.com/VAST"}


MIGRATION_GUIDE = "http://testserver.local/docs/migration-openrtb-to-core"


def bid_request(**imp_overrides: Any) -> dict[str, Any]:
    """A valid BidRequest for the seeded moving screen (1920x1080, video/mp4)."""
    imp: dict[str, Any] = {
        "id": "imp-1",
        "tagid": "ext-moving-1",
        "video": {"w": 1920, "h": 1080, "mimes": ["video/mp4", "image/jpeg"]},
        "pmp": {"deals": [{"id": "deal-7", "bidfloor": 1.00, "at": 3}]},
        "qty": {"multiplier": 119.47, "sourcetype": 1, "vendor": "route.org.uk"},
    }
    imp.update(imp_overrides)
    return {"id": "auction-42", "at": 3, "imp": [imp]}


def queue_kept(servers: ServerUrls, **overrides: str) -> Settings:
    """Test settings without the record writer, so the queued records stay for the test to
    read (the writer deletes what it has written)."""
    return make_settings(servers, RECORD_WRITER="0", **overrides)


async def seeded(live: Live, **lists: Any) -> dict[str, str]:
    """Seed the basic inventory (or with `lists` replaced); headers with a key of PUB."""
    await f.seed(live.database_url, f.basic_document(**lists))
    key = await f.make_key(live.database_url)
    await live.rt.inventory.reload()
    return {"Authorization": f"Bearer {key}"}


def assert_deprecated(response: httpx.Response) -> None:
    assert response.headers["Deprecation"] == "true"
    assert response.headers["Link"] == f'<{MIGRATION_GUIDE}>; rel="deprecation"'


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert_deprecated(response)
    body: dict[str, Any] = response.json()
    assert set(body) == {
        "error",
        "message",
        "details",
        "deprecated",
        "deprecation_message",
        "documentation",
        "migration_guide",
    }
    assert body["error"] == code
    assert body["deprecated"] is True
    assert body["migration_guide"] == MIGRATION_GUIDE
    return body


def _registry() -> Registry:
    resources = []
    for path in SCHEMA_DIR.glob("*.json"):
        contents = json.loads(path.read_text())
        if "$id" in contents:
            resources.append((contents["$id"], Resource.from_contents(contents)))
    return Registry().with_resources(resources)


_REGISTRY = _registry()


def validate_bid_response(body: dict[str, Any]) -> None:
    """Against the IAB OpenRTB 2.6 JSON schema, and every adm against the VAST 4.0 XSD
    (without `Expires`, docs/contract.md#6a-vast-documents)."""
    schema = json.loads((SCHEMA_DIR / "BidResponse.json").read_text())
    jsonschema.Draft202012Validator(schema, registry=_REGISTRY).validate(body)
    for seat in body.get("seatbid", []):
        for bid in seat["bid"]:
            validate_vast(bid["adm"])


def validate_vast(adm: str) -> ET.Element:
    return assert_valid_vast(adm)


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def queue_records(redis: Redis, kind: str | None = None) -> list[dict[str, Any]]:
    """Every record in the shard queues (type t, offer o, payload p, script extra x)."""
    records: list[dict[str, Any]] = []
    for key in queue_keys():
        entries: list[tuple[Any, dict[Any, Any]]] = await redis.xrange(key)  # type: ignore[assignment]
        for _, fields in entries:
            entry = {_text(k): _text(v) for k, v in fields.items()}
            record: dict[str, Any] = {
                "t": entry["t"],
                **{name: json.loads(entry[name]) for name in ("o", "p", "x") if name in entry},
            }
            if kind is None or record["t"] == kind:
                records.append(record)
    return records


async def post_bid(
    live: Live, headers: dict[str, str], body: Any, path: str = BID
) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await live.client.post(
        path, content=content, headers={**headers, "Content-Type": "application/json"}
    )


def substitute(lurl: str, **values: str) -> str:
    """The lurl as an SSP calls it: the macros replaced (those not given stay as they are)."""
    macros = {
        "reason": "${AUCTION_LOSS}",
        "price": "${AUCTION_PRICE}",
        "cur": "${AUCTION_CURRENCY}",
        "mtw": "${AUCTION_MIN_TO_WIN}",
        "aid": "${AUCTION_ID}",
    }
    for name, value in values.items():
        lurl = lurl.replace(f"{name}={macros[name]}", f"{name}={value}")
    return lurl


def local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def tracking_of(bid: dict[str, Any]) -> dict[str, str]:
    """event -> URL, from the bid's VAST."""
    root = ET.fromstring(bid["adm"])
    urls = {"impression": root.findtext(".//v:Impression", namespaces=NS) or ""}
    for tracking in root.findall(".//v:Tracking", NS):
        urls[tracking.get("event") or ""] = tracking.text or ""
    return urls
