"""Queue entries -> Postgres rows: decoding the record format of docs/architecture.md
("Records") and writing a batch of them in one transaction, idempotently.

Every record carries the offer hash (`o`), so the offer row is upserted from each one and no
record depends on an earlier one having been written; the type-specific rows are inserted with
`ON CONFLICT DO NOTHING`, so a replayed entry changes nothing. The one exception is a playout,
whose `o` is the deal hash: it needs its deal row, written by the earlier `offer_accepted`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import MAX_EMAX, MIN_EMIN, ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

import msgspec

from store.postgres import Conn

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FINAL = frozenset({"accepted", "rejected", "expired", "lost", "billed"})
_STATUSES = _FINAL | {"open"}
# A NUMERIC(20, 6) column holds 14 digits before the point: a value with more is dropped (set
# NULL), not fatal.
_NUMERIC_DIGITS = 14
# The most decimals a client-supplied number keeps (an OpenRTB audience has up to 18).
_FINEST_DECIMALS = 20
_FINEST = Decimal(1).scaleb(-_FINEST_DECIMALS)
# Room for every digit of a value below 10**14 at _FINEST_DECIMALS decimals, and for the
# exponents of anything a client writes.
_WIDE = Context(prec=_NUMERIC_DIGITS + _FINEST_DECIMALS + 2, Emax=MAX_EMAX, Emin=MIN_EMIN)
_json = msgspec.json.Decoder()


class RecordError(ValueError):
    """An entry that can never become rows: missing fields, bad JSON, unknown type."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One queue entry as read from its stream."""

    stream: str
    entry_id: str
    fields: dict[str, str]

    @property
    def entry_ms(self) -> int:
        """When Redis appended it (the first part of the stream id)."""
        return int(self.entry_id.split("-", 1)[0])

    @property
    def kind(self) -> str:
        return self.fields.get("t", "?")


@dataclass
class Rows:
    """The rows one batch becomes, per table, in foreign-key order."""

    offers: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    deals: list[tuple[Any, ...]] = field(default_factory=list)
    billing: list[tuple[Any, ...]] = field(default_factory=list)
    rejections: list[tuple[Any, ...]] = field(default_factory=list)
    playouts: list[tuple[Any, ...]] = field(default_factory=list)
    losses: list[tuple[Any, ...]] = field(default_factory=list)
    tracking: list[tuple[Any, ...]] = field(default_factory=list)


# -- conversions ----------------------------------------------------------------------------


def micros_to_numeric(micros: object) -> Decimal:
    """Integer micro-cents -> NUMERIC cents, exactly (2500000 -> Decimal('2.500000'))."""
    if isinstance(micros, bool) or not isinstance(micros, int | str | float):
        raise RecordError(f"not an amount: {micros!r}")
    try:
        amount = Decimal(repr(micros) if isinstance(micros, float) else str(micros))
    except InvalidOperation:
        raise RecordError(f"not an amount: {micros!r}") from None
    if not amount.is_finite() or amount != amount.to_integral_value():
        raise RecordError(f"not a whole number of micro-cents: {micros!r}")
    return amount.scaleb(-6)


def ms_to_time(ms: object) -> datetime:
    try:
        return _EPOCH + timedelta(milliseconds=int(str(ms)))
    except (TypeError, ValueError, OverflowError):
        raise RecordError(f"not epoch milliseconds: {ms!r}") from None


def _optional_ms(ms: object) -> datetime | None:
    return None if ms in (None, "") else ms_to_time(ms)


def loose_time(value: object) -> datetime | None:
    """A client-supplied moment (ISO 8601, or epoch seconds / milliseconds), None when it is
    none of those: such fields are informative, a bad one must not block the record."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    try:
        if text.isdigit():
            number = int(text)
            return _EPOCH + (
                timedelta(milliseconds=number) if number > 10**11 else timedelta(seconds=number)
            )
        moment = datetime.fromisoformat(text.replace(" ", "T", 1) if " " in text else text)
    except (ValueError, OverflowError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def loose_decimal(value: object) -> Decimal | None:
    """A client-supplied number as Postgres can store it, None when it is not one or too big.
    Digits beyond `_FINEST` decimals (`1e-16384`, which Postgres' numeric input refuses) are
    rounded off as Postgres rounds: no column keeps that many."""
    if value is None or isinstance(value, bool):
        return None
    try:
        amount = Decimal(repr(value) if isinstance(value, float) else str(value).strip())
    except InvalidOperation:
        return None
    # Judged on the digits, never in a Decimal context: abs() or a comparison that rounds
    # would overflow on `1e1000000` (decimal.Overflow, an ArithmeticError).
    if not amount.is_finite() or (amount and amount.adjusted() >= _NUMERIC_DIGITS):
        return None
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -_FINEST_DECIMALS:
        amount = amount.quantize(_FINEST, rounding=ROUND_HALF_UP, context=_WIDE)
    return amount


def loose_int(value: object) -> int | None:
    amount = loose_decimal(value)
    if amount is None or amount != amount.to_integral_value() or abs(amount) > 2**31 - 1:
        return None
    return int(amount)


def _text_or_none(value: object) -> str | None:
    """Client-supplied text as Postgres can store it: a NUL (which `text` refuses, so the
    record would be dead-lettered after its request was acknowledged) becomes U+FFFD."""
    if value is None:
        return None
    text = str(value)
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


#: Largest value of a Postgres `integer` column.
_INT_MAX = 2**31 - 1


def _seconds(duration: Decimal | None) -> int | None:
    """A playout's duration in whole seconds; None when negative or beyond an `integer`."""
    if duration is None or duration < 0:
        return None
    seconds = int(duration.to_integral_value())
    return seconds if seconds <= _INT_MAX else None


# -- decoding -------------------------------------------------------------------------------


def _object(raw: str | None, name: str) -> dict[str, Any]:
    if raw is None:
        raise RecordError(f"field {name!r} missing")
    try:
        value = _json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise RecordError(f"field {name!r} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RecordError(f"field {name!r} is not a JSON object")
    return value


def _need(mapping: dict[str, Any], key: str, where: str) -> Any:
    value = mapping.get(key)
    if value is None or value == "":
        raise RecordError(f"{where}.{key} missing")
    return value


def _offer_row(o: dict[str, Any], p: dict[str, Any], reason: str | None) -> tuple[Any, ...]:
    status = _need(o, "status", "o")
    if status not in _STATUSES:
        raise RecordError(f"unknown offer status {status!r}")
    audience = o.get("audience", p.get("audience"))
    return (
        _need(o, "offer_id", "o"),
        _need(o, "channel", "o"),
        status,
        _need(o, "publisher", "o"),
        _need(o, "screen", "o"),
        _need(o, "campaign", "o"),
        _need(o, "creative", "o"),
        micros_to_numeric(_need(o, "price", "o")),
        ms_to_time(_need(o, "created_ms", "o")),
        ms_to_time(_need(o, "expires_ms", "o")),
        _optional_ms(o.get("resolved_ms")),
        reason,
        _text_or_none(o.get("auction_id", p.get("auction_id"))),
        _text_or_none(o.get("imp_id", p.get("imp_id"))),
        _text_or_none(o.get("pmp_deal_id", p.get("pmp_deal_id"))),
        loose_decimal(audience),
    )


def _merge_offer(rows: Rows, row: tuple[Any, ...]) -> None:
    """Keep one row per offer in a batch: a final status beats `open`, the first final wins."""
    seen = rows.offers.get(row[0])
    if seen is None or (seen[2] == "open" and row[2] != "open"):
        rows.offers[row[0]] = row


def _billing_row(
    o: dict[str, Any], p: dict[str, Any], x: dict[str, Any], source: str, deal_id: str | None
) -> tuple[Any, ...]:
    gross = micros_to_numeric(_need(p, "gross_micros", "p"))
    commission = micros_to_numeric(_need(p, "commission_micros", "p"))
    net = micros_to_numeric(_need(p, "net_micros", "p"))
    if net + commission != gross:
        raise RecordError("net + commission != gross")
    rate = loose_decimal(_need(p, "commission_rate", "p"))
    if rate is None:
        raise RecordError("p.commission_rate is not a number")
    return (
        _need(p, "billing_id", "p"),
        o["offer_id"],
        deal_id,
        source,
        o["publisher"],
        _need(o, "advertiser", "o"),
        o["campaign"],
        _text_or_none(x.get("billing_code")),
        rate,
        gross,
        commission,
        net,
        ms_to_time(_need(o, "resolved_ms", "o")),
    )


def _add_accepted(rows: Rows, o: dict[str, Any], p: dict[str, Any], x: dict[str, Any]) -> None:
    deal_id = p.get("deal_id") or _need(o, "deal_id", "o")
    billing = _billing_row(o, p, x, "core_accept", deal_id)
    rows.deals.append(
        (deal_id, o["offer_id"], o["publisher"], o["campaign"], *billing[9:12], billing[12])
    )
    rows.billing.append(billing)


def _add_playout(rows: Rows, entry: Entry, deal: dict[str, Any], p: dict[str, Any]) -> None:
    confirmed = ms_to_time(p.get("confirmed_ms") or deal.get("confirmed_ms") or entry.entry_ms)
    duration = loose_decimal(p.get("duration_seconds"))
    rate = loose_decimal(p.get("completion_rate"))
    rows.playouts.append(
        (
            _need(p, "playout_id", "p"),
            _need(deal, "deal_id", "o"),
            loose_time(p.get("played_at")) or confirmed,
            confirmed,
            _seconds(duration),
            None if rate is None or not 0 <= rate <= 100 else rate,
            _text_or_none(p.get("player_version")),
            _text_or_none(p.get("screen_resolution")),
        )
    )


def loss_body_json(p: dict[str, Any]) -> str | None:
    """The JSON text a loss notice's body is stored as (a `json` column, which keeps the text
    and takes a NUL as its `\u0000` escape): `body_json`, the body exactly as the SSP sent it
    (the edge checked it is JSON); else `body`, a text that is not JSON (or the value an older
    version queued), encoded as JSON."""
    exact = p.get("body_json")
    if isinstance(exact, str):
        return exact
    body = p.get("body")
    return None if body is None else msgspec.json.encode(body).decode()


def _add_loss(
    rows: Rows, entry: Entry, o: dict[str, Any], p: dict[str, Any], x: dict[str, Any]
) -> None:
    rows.losses.append(
        (
            o["offer_id"],
            loose_int(p.get("reason")),
            loose_decimal(p.get("price")),
            _text_or_none(p.get("cur")),
            loose_decimal(p.get("mtw")),
            _text_or_none(p.get("aid")),
            loss_body_json(p),
            bool(x.get("after_billing", False)),
            micros_to_numeric(x.get("released") or 0),
            ms_to_time(entry.entry_ms),
        )
    )


def _add_tracking(
    rows: Rows, entry: Entry, o: dict[str, Any], p: dict[str, Any], x: dict[str, Any]
) -> None:
    rows.tracking.append(
        (
            _need(p, "event_id", "p"),
            o["offer_id"],
            str(_need(p, "event", "p")),
            o["channel"],
            loose_time(p.get("ts")),
            _text_or_none(p.get("price")),
            _text_or_none(p.get("aud")),
            bool(x.get("billed", False)),
            ms_to_time(entry.entry_ms),
        )
    )


# No reservation queues `offer_created` (the outcome record carries the offer), but a queue
# written by an older version during a rolling deploy may still hold some, and they must drain:
# one upserts an `open` offer row, which the outcome record later makes final (the upsert never
# turns a final row back to open, whichever order they arrive in).
_OFFER_KINDS = frozenset(
    {
        "offer_created",
        "offer_accepted",
        "offer_rejected",
        "offer_expired",
        "loss_notice",
        "impression_billed",
        "tracking_event",
    }
)
#: Every record type the writer knows.
RECORD_TYPES = _OFFER_KINDS | {"playout_confirmed"}


def add_entry(rows: Rows, entry: Entry) -> None:
    """Fold one entry into `rows`; RecordError when it cannot be decoded. On error `rows` is
    unchanged, so the caller can skip the entry and keep the rest."""
    kind = entry.kind
    o = _object(entry.fields.get("o"), "o")
    p = _object(entry.fields.get("p", "{}"), "p")
    x = _object(entry.fields.get("x", "{}"), "x")
    if kind == "playout_confirmed":
        _add_playout(rows, entry, o, p)
        return
    if kind not in _OFFER_KINDS:
        raise RecordError(f"unknown record type {kind!r}")
    reason = p.get("rejection_reason") if kind == "offer_rejected" else None
    offer = _offer_row(o, p, _text_or_none(reason))
    staged = Rows()
    if kind == "offer_accepted":
        _add_accepted(staged, o, p, x)
    elif kind == "offer_rejected":
        staged.rejections.append(
            (o["offer_id"], offer[11], offer[10] or ms_to_time(entry.entry_ms))
        )
    elif kind == "impression_billed":
        staged.billing.append(_billing_row(o, p, x, "openrtb_impression", None))
    elif kind == "loss_notice":
        _add_loss(staged, entry, o, p, x)
    elif kind == "tracking_event":
        _add_tracking(staged, entry, o, p, x)
    _merge_offer(rows, offer)
    for name in ("deals", "billing", "rejections", "losses", "tracking"):
        getattr(rows, name).extend(getattr(staged, name))


# -- writing --------------------------------------------------------------------------------


class _Insert:
    """One INSERT of a whole batch: each column arrives as one array parameter (a statement
    per table and batch instead of one per row, which costs Postgres about 0.25 ms a row).

    Numeric columns are sent as the text of a Postgres array (`{2.500000,NULL}`) and cast
    there: asyncpg's binary encoding of a `Decimal` costs 2-3 us an element in the worker,
    and an accept has nine of them, while `numeric_in` costs Postgres next to nothing. The
    text of a finite `Decimal` holds only digits, `.`, `-`, `+` and `E`, nothing the array
    syntax would read as a delimiter or a quote.

    A client-supplied moment (type `client_timestamptz`, stored as `timestamptz`) is sent as
    ISO 8601 text too: asyncpg writes `datetime.min` and `datetime.max` as -infinity and
    infinity, so a playout played at 0001-01-01T00:00:00Z would be stored as -infinity (and
    its deal could not be read). ISO text holds digits, `-`, `:`, `.`, `+` and `T`."""

    __slots__ = ("as_text", "sql")

    def __init__(self, table: str, columns: str, types: str, tail: str) -> None:
        names = types.split()
        self.as_text = tuple(_AS_TEXT[name][1] if name in _AS_TEXT else None for name in names)
        params = ", ".join(
            f"${n}::text::{_AS_TEXT[name][0]}[]" if name in _AS_TEXT else f"${n}::{name}[]"
            for n, name in enumerate(names, start=1)
        )
        # Built from this module's constants only, at import.
        self.sql = f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({params}) {tail}"  # noqa: S608

    def arguments(self, rows: list[tuple[Any, ...]]) -> list[Any]:
        """The statement's parameters for `rows`: one array (or array text) per column."""
        return [
            column if text is None else _array_text(column, text)
            for text, column in zip(self.as_text, zip(*rows, strict=True), strict=True)
        ]


def _array_text(values: tuple[Any, ...], text: Callable[[Any], str]) -> str:
    return "{" + ",".join("NULL" if value is None else text(value) for value in values) + "}"


# Column types sent as the text of an array: (the type Postgres casts that text to, the text of
# one value).
_AS_TEXT: dict[str, tuple[str, Callable[[Any], str]]] = {
    "numeric": ("numeric", str),
    "client_timestamptz": ("timestamptz", datetime.isoformat),
}


_UPSERT_OFFER = _Insert(
    "offers",
    "offer_id, channel, status, publisher_id, screen_id, campaign_id, creative_id, "
    "bid_price_cents, created_at, expires_at, resolved_at, rejection_reason, auction_id, "
    "imp_id, pmp_deal_id, audience",
    "uuid text text uuid uuid uuid uuid numeric timestamptz timestamptz timestamptz text text "
    "text text numeric",
    """ON CONFLICT (offer_id) DO UPDATE SET
    status = EXCLUDED.status,
    resolved_at = COALESCE(EXCLUDED.resolved_at, offers.resolved_at),
    rejection_reason = COALESCE(EXCLUDED.rejection_reason, offers.rejection_reason)
WHERE offers.status = 'open' AND EXCLUDED.status <> 'open'""",
)
_INSERT_DEAL = _Insert(
    "deals",
    "deal_id, offer_id, publisher_id, campaign_id, gross_price_cents, commission_cents, "
    "net_price_cents, accepted_at",
    "uuid uuid uuid uuid numeric numeric numeric timestamptz",
    "ON CONFLICT DO NOTHING",
)
_INSERT_BILLING = _Insert(
    "billing_records",
    "billing_id, offer_id, deal_id, source, publisher_id, advertiser_id, campaign_id, "
    "billing_code, commission_rate, gross_price_cents, commission_cents, net_price_cents, "
    "billed_at",
    "uuid uuid uuid text uuid uuid uuid text numeric numeric numeric numeric timestamptz",
    "ON CONFLICT DO NOTHING",
)
_INSERT_REJECTION = _Insert(
    "rejections", "offer_id, reason, rejected_at", "uuid text timestamptz", "ON CONFLICT DO NOTHING"
)
_INSERT_PLAYOUT = _Insert(
    "playouts",
    "playout_id, deal_id, played_at, confirmed_at, duration_seconds, completion_rate, "
    "player_version, screen_resolution",
    "uuid uuid client_timestamptz timestamptz integer numeric text text",
    "ON CONFLICT DO NOTHING",
)
_INSERT_LOSS = _Insert(
    "loss_notices",
    "offer_id, reason, price, currency, min_to_win, auction_id, body, after_billing, "
    "released_cents, received_at",
    "uuid integer numeric text numeric text json boolean numeric timestamptz",
    "ON CONFLICT DO NOTHING",
)
_INSERT_TRACKING = _Insert(
    "tracking_events",
    "event_id, offer_id, event, channel, event_ts, price, audience, billed, received_at",
    "uuid uuid text text timestamptz text text boolean timestamptz",
    "ON CONFLICT DO NOTHING",
)


async def write_rows(conn: Conn, rows: Rows) -> None:
    """Write one batch's rows in one transaction (foreign keys first); all or nothing."""
    async with conn.transaction():
        for insert, batch in (
            (_UPSERT_OFFER, list(rows.offers.values())),
            (_INSERT_DEAL, rows.deals),
            (_INSERT_BILLING, rows.billing),
            (_INSERT_REJECTION, rows.rejections),
            (_INSERT_PLAYOUT, rows.playouts),
            (_INSERT_LOSS, rows.losses),
            (_INSERT_TRACKING, rows.tracking),
        ):
            if batch:
                await conn.execute(insert.sql, *insert.arguments(batch))
