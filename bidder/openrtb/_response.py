"""What this interface answers: the BidResponse (contract table), the no-bid bodies, and the
headers every OpenRTB response carries."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import MediaType, Response

from bidder.deprecation import deprecation_headers, deprecation_notice
from bidder.http.asgi import Answer, encode_headers, json_answer
from bidder.settings import PerSettings, Settings
from store.hot.ids import random_uuid

CURRENCY = "EUR"
#: No-bid reason codes used here (contract: 0 unknown error or resolution mismatch, 1 technical).
NBR_UNKNOWN = 0
NBR_TECHNICAL = 1

_encoder = msgspec.json.Encoder(decimal_format="number")

#: A random version-4 UUID in canonical text, as `str(uuid.uuid4())` gives (bidid, Bid.id).
new_uuid = random_uuid


class Bid(msgspec.Struct, omit_defaults=True):
    id: str
    impid: str
    price: msgspec.Raw  # EUR as a plain JSON number (money.eur_text), never "2E-8"
    adid: str
    cid: str
    crid: str
    adm: str
    lurl: str
    adomain: list[str]
    dealid: str
    w: int
    h: int
    #: The winner's IAB categories and their taxonomy (OpenRTB 2.6 `cat`, `cattax`); left out
    #: when the campaign has none.
    cat: list[str] | None = None
    cattax: int | None = None


class SeatBid(msgspec.Struct):
    bid: list[Bid]


class BidResponse(msgspec.Struct):
    id: str
    seatbid: list[SeatBid]
    bidid: str
    cur: str
    ext: msgspec.Raw  # {"platform": deprecation notice}, encoded once (_Fixed)


class NoBidResponse(msgspec.Struct):
    id: str
    seatbid: list[SeatBid]
    nbr: int
    cur: str = CURRENCY


def headers(settings: Settings) -> dict[str, str]:
    return {**deprecation_headers(settings), "x-openrtb-version": "2.6"}


class _Fixed:
    """What every answer of a process repeats, encoded once: the headers of `headers()` as
    the ASGI server takes them (lower-case names, latin-1) and the BidResponse's `ext`."""

    __slots__ = ("ext", "headers")

    def __init__(self, settings: Settings) -> None:
        self.headers = tuple(encode_headers(headers(settings)))
        self.ext = msgspec.Raw(_encoder.encode({"platform": deprecation_notice(settings)}))


_fixed = PerSettings(_Fixed)


def _json_answer(settings: Settings, body: bytes) -> Answer:
    return json_answer(body, 200, _fixed(settings).headers)


def bid_response(settings: Settings, request_id: str, bid: Bid) -> Answer:
    body = BidResponse(
        id=request_id,
        seatbid=[SeatBid(bid=[bid])],
        bidid=new_uuid(),
        cur=CURRENCY,
        ext=_fixed(settings).ext,
    )
    return _json_answer(settings, _encoder.encode(body))


def no_bid(settings: Settings, request_id: str, nbr: int) -> Answer:
    """200 with an empty seatbid and a reason (resolution mismatch, technical failure)."""
    body = NoBidResponse(id=request_id, seatbid=[], nbr=nbr)
    return _json_answer(settings, _encoder.encode(body))


def no_content(settings: Settings) -> Answer:
    """204: no matching offer, minimum not met, MIME type not allowed; also a stored notice."""
    return Answer(204, list(_fixed(settings).headers), b"")


def json_document(settings: Settings, document: dict[str, Any]) -> Response[bytes]:
    return Response(_encoder.encode(document), media_type=MediaType.JSON, headers=headers(settings))
