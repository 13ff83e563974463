"""Past traffic written as the record writer writes it: each `Play` becomes the queue entries
the hot path would have queued for it (docs/architecture.md, "Records"), folded and written by
`store.record_rows` in batches. The demo's week of history and the reports' tests use it, so
what they read is exactly what real traffic leaves in Postgres."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal

import msgspec

from matching.money import split_gross
from store.postgres import Conn
from store.record_rows import Entry, Rows, add_entry, write_rows

__all__ = ["Outcome", "Play", "play_entries", "write_history"]

Outcome = Literal["accepted", "billed", "rejected", "expired", "lost"]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_BATCH = 500
_TTL = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Play:
    """One offer and what became of it. `accepted` (Core) and `billed` (an OpenRTB
    impression) are paid at `price_micros`, split by `commission_rate`; `played_at` set: the
    player confirmed the play (a Core deal only); `impression`: a tracking impression."""

    offer_id: str
    channel: Literal["core", "openrtb"]
    outcome: Outcome
    publisher_id: str
    screen_id: str
    campaign_id: str
    creative_id: str
    advertiser_id: str
    price_micros: int
    at: datetime
    commission_rate: Decimal
    audience: Decimal | None = None
    billing_code: str | None = None
    rejection_reason: str | None = None
    played_at: datetime | None = None
    impression: bool = False

    def derived_id(self, kind: str) -> str:
        """A stable id of this play's deal, billing record, playout or event."""
        return str(uuid.uuid5(uuid.UUID(self.offer_id), kind))


def _ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def play_entries(play: Play) -> list[Entry]:
    """The queue entries the hot path queues for `play`, in the order it queues them."""
    paid = play.outcome in ("accepted", "billed")
    offer: dict[str, object] = {
        "offer_id": play.offer_id,
        "channel": play.channel,
        "status": play.outcome,
        "publisher": play.publisher_id,
        "screen": play.screen_id,
        "campaign": play.campaign_id,
        "creative": play.creative_id,
        "advertiser": play.advertiser_id,
        "price": play.price_micros,
        "created_ms": _ms(play.at - timedelta(seconds=1)),
        "expires_ms": _ms(play.at - timedelta(seconds=1) + _TTL),
        "resolved_ms": _ms(play.at),
    }
    if play.audience is not None:
        offer["audience"] = str(play.audience)
    payload: dict[str, object] = {}
    if paid:
        net, commission = split_gross(play.price_micros, play.commission_rate)
        payload = {
            "billing_id": play.derived_id("billing"),
            "gross_micros": play.price_micros,
            "commission_micros": commission,
            "net_micros": net,
            "commission_rate": str(play.commission_rate),
        }
    kind = {
        "accepted": "offer_accepted",
        "billed": "impression_billed",
        "rejected": "offer_rejected",
        "expired": "offer_expired",
        "lost": "loss_notice",
    }[play.outcome]
    if play.outcome == "accepted":
        offer["deal_id"] = play.derived_id("deal")
        payload["deal_id"] = offer["deal_id"]
    if play.outcome == "rejected":
        payload["rejection_reason"] = play.rejection_reason
    if play.outcome == "lost":
        payload = {"reason": 102}
    extra = {"billing_code": play.billing_code} if paid and play.billing_code else {}
    ms = _ms(play.at)
    fields = {"t": kind, "o": _json(offer), "p": _json(payload), "x": _json(extra)}
    entries = [Entry("history", f"{ms}-0", fields)]
    if play.impression:
        event = {"event_id": play.derived_id("impression"), "event": "impression", "ts": None}
        entries.append(
            Entry(
                "history",
                f"{ms}-1",
                {"t": "tracking_event", "o": _json(offer), "p": _json(event), "x": "{}"},
            )
        )
    if play.played_at is not None and play.outcome == "accepted":
        deal = {"deal_id": offer["deal_id"], "confirmed_ms": _ms(play.played_at)}
        playout = {
            "playout_id": play.derived_id("playout"),
            "played_at": play.played_at.isoformat(),
        }
        entries.append(
            Entry(
                "history",
                f"{_ms(play.played_at)}-2",
                {"t": "playout_confirmed", "o": _json(deal), "p": _json(playout), "x": "{}"},
            )
        )
    return entries


def _batches(plays: Iterable[Play]) -> Iterator[list[Play]]:
    batch: list[Play] = []
    for play in plays:
        batch.append(play)
        if len(batch) == _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


async def write_history(conn: Conn, plays: Iterable[Play]) -> int:
    """Write `plays` as the record writer writes their entries (idempotently: writing the
    same plays twice changes nothing); returns how many plays were written."""
    count = 0
    for batch in _batches(plays):
        rows = Rows()
        for play in batch:
            for entry in play_entries(play):
                add_entry(rows, entry)
        # A playout needs its deal row: the deals go in the same transaction, before it.
        await write_rows(conn, rows)
        count += len(batch)
    return count
