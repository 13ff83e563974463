"""The requests the bench sends, built from the seeded inventory and the publisher keys.

Shared by the wrk runs (as request files) and the Locust scenarios (as a JSON data file), so
both drive the same screens with the same bodies.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.throughput import CORE, OPENRTB, RequestLine, write_requests
from matching.engine import Match, VideoSlot, select
from matching.inventory import InventoryDocument, Screen
from matching.snapshot import build_snapshot

#: Values a losing exchange puts into the loss-notice macros (reason 102: lost to a PMP deal).
LOSS_MACROS = {
    "${AUCTION_LOSS}": "102",
    "${AUCTION_PRICE}": "3.10",
    "${AUCTION_CURRENCY}": "EUR",
    "${AUCTION_MIN_TO_WIN}": "3.11",
}
#: The SSP's floor in EUR CPM: below every bench campaign's CPM, so a floor never blocks a bid.
BID_FLOOR_EUR = 1.5
BID_MIMES = ["video/mp4", "video/quicktime"]


@dataclass(frozen=True)
class Target:
    """A screen as the load generators address it."""

    screen_id: str
    external_id: str
    publisher_id: str
    api_key: str
    width: int
    height: int
    audience: float
    type: str


def targets(doc: InventoryDocument, keys: dict[str, str]) -> list[Target]:
    return [
        Target(
            screen_id=s.id,
            external_id=s.external_id or "",
            publisher_id=s.publisher_id,
            api_key=keys[s.publisher_id],
            width=s.width,
            height=s.height,
            audience=float(s.audience_per_play),
            type=s.type,
        )
        for s in doc.screens
        if s.active
    ]


def bid_request(target: Target | Screen, rng: random.Random) -> dict[str, Any]:
    """A DOOH video BidRequest shaped like the OpenRTB 2.6 implementation guide's example
    7.9.6.3, addressed to one seeded moving screen (tagid = its external id)."""
    if isinstance(target, Screen):
        external_id, width, height = target.external_id, target.width, target.height
        audience = float(target.audience_per_play)
    else:
        external_id, width, height, audience = (
            target.external_id,
            target.width,
            target.height,
            target.audience,
        )
    return {
        "id": uuid.UUID(int=rng.getrandbits(128), version=4).hex,
        "at": 3,
        "imp": [
            {
                "id": "1",
                "tagid": external_id,
                "secure": 1,
                "exp": 720,
                "video": {
                    "w": width,
                    "h": height,
                    "minduration": 5,
                    "maxduration": 30,
                    "mimes": BID_MIMES,
                    "boxingallowed": 0,
                },
                "pmp": {
                    "private_auction": 1,
                    "deals": [{"id": "DEAL-BENCH-1", "at": 3, "bidfloor": BID_FLOOR_EUR}],
                },
                "qty": {"multiplier": audience, "sourcetype": 1, "vendor": "route.org.uk"},
                "dt": 1_647_010_095,
            }
        ],
        "device": {
            "geo": {"lat": 51.51112, "lon": -0.09043, "lastfix": 0},
            "devicetype": 8,
            "w": width,
            "h": height,
            "ifa": "1234928801",
        },
        "dooh": {
            "id": "1Frame",
            "name": "Transvision",
            "keywords": "LargeFormat,CANNON STREET STN,MAIN CONCOURSE",
            "publisher": {"id": "VJCDUK", "name": "viooh"},
            "domain": "viooh.com",
            "venuetax": 1,
            "venuetypeid": 10602,
        },
        "cur": ["EUR"],
        "tmax": 200,
    }


def _sample(items: list[Target], count: int, rng: random.Random) -> Iterator[Target]:
    for _ in range(count):
        yield items[rng.randrange(len(items))]


def healthz_lines() -> list[RequestLine]:
    return [RequestLine("GET", "/healthz")]


def offer_request_lines(all_targets: list[Target], count: int, seed: int) -> list[RequestLine]:
    """Offer requests for random screens of every type, each with its publisher's key."""
    rng = random.Random(seed)
    return [
        RequestLine("GET", f"{CORE}/offers/request/{t.screen_id}", t.api_key)
        for t in _sample(all_targets, count, rng)
    ]


def moving(all_targets: list[Target]) -> list[Target]:
    return [t for t in all_targets if t.type == "moving" and t.external_id]


def bid_lines(
    all_targets: list[Target], count: int, seed: int, *, only_moving: bool = True
) -> list[RequestLine]:
    """OpenRTB bids for random moving screens (the only type that takes video)."""
    rng = random.Random(seed)
    screens = moving(all_targets) if only_moving else all_targets
    return [
        RequestLine(
            "POST",
            f"{OPENRTB}/bid",
            t.api_key,
            json.dumps(bid_request(t, rng), separators=(",", ":")),
        )
        for t in _sample(screens, count, rng)
    ]


def bidding_in_every(
    all_targets: list[Target], docs: list[InventoryDocument], now: datetime
) -> list[Target]:
    """Moving screens that get a bid (not a 204 or an nbr) from each inventory in `docs`, by
    the matching engine itself: the inventory-size comparison then sends the same requests to
    both inventories and measures the same outcome, a bid."""
    snapshots = [build_snapshot(doc) for doc in docs]
    kept = []
    for target in moving(all_targets):
        slot = VideoSlot(target.width, target.height, frozenset(BID_MIMES))
        audience = Decimal(str(target.audience))
        if all(
            isinstance(
                select(snap, snap.screens[target.screen_id], now, {}, audience=audience, slot=slot),
                Match,
            )
            for snap in snapshots
        ):
            kept.append(target)
    return kept


def pool_prep_files(
    folder: Path, all_targets: list[Target], per_publisher: int, seed: int
) -> tuple[str, int]:
    """One offer-request file per publisher (`prep-<n>.tsv`, n from 1): wrk runs one thread
    per publisher, so every offer it harvests is known to belong to that thread's key."""
    rng = random.Random(seed)
    by_publisher: dict[str, list[Target]] = {}
    for t in all_targets:
        by_publisher.setdefault(t.publisher_id, []).append(t)
    for n, publisher_id in enumerate(sorted(by_publisher), start=1):
        write_requests(
            folder / f"prep-{n}.tsv",
            offer_request_lines(by_publisher[publisher_id], per_publisher, rng.randrange(1 << 30)),
        )
    return str(folder / "prep-%d.tsv"), len(by_publisher)


def accept_lines(pool_file: Path) -> list[RequestLine]:
    """One accept per pooled offer, at its bid price (lines: key, offer id, price)."""
    lines = []
    for row in pool_file.read_text().splitlines():
        api_key, offer_id, price = row.split("\t")
        body = json.dumps({"action": "accept", "accepted_price_cents": json.loads(price)})
        lines.append(RequestLine("POST", f"{CORE}/offers/response/{offer_id}", api_key, body))
    return lines


def substitute(url: str, macros: dict[str, str]) -> str:
    for macro, value in macros.items():
        url = url.replace(macro, value)
    return url


def loss_lines(lurl_file: Path) -> list[RequestLine]:
    """One loss notice per harvested `lurl`, macros substituted as an exchange would."""
    lines = []
    for lurl in lurl_file.read_text().splitlines():
        parts = urlsplit(substitute(lurl.replace("\\/", "/"), LOSS_MACROS))
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        lines.append(RequestLine("GET", target))
    return lines
