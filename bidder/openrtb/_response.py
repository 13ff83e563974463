"""What this interface answers: the BidResponse (contract table), the no-bid bodies, and the
headers every OpenRTB response carries."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import msgspec
from litestar import MediaType, Response

from bidder.asgi import Answer
from bidder.deprecation import deprecation_headers, deprecation_notice
from bidder.settings import Settings

CURRENCY = "EUR"
#: No-bid reason codes used here (contract: 0 unknown error or resolution mismatch, 1 technical).
NBR_UNKNOWN = 0
NBR_TECHNICAL = 1

_encoder = msgspec.json.Encoder(decimal_format="number")


class Bid(msgspec.Struct):
    id: str
    impid: str
    price: Decimal
    adid: str
    cid: str
    crid: str
    adm: str
    lurl: str
    adomain: list[str]
    dealid: str
    w: int
    h: int


class SeatBid(msgspec.Struct):
    bid: list[Bid]


class BidResponse(msgspec.Struct):
    id: str
    seatbid: list[SeatBid]
    bidid: str
    cur: str
    ext: dict[str, Any]


class NoBidResponse(msgspec.Struct):
    id: str
    seatbid: list[SeatBid]
    nbr: int
    cur: str = CURRENCY


def headers(settings: Settings) -> dict[str, str]:
    return {**deprecation_headers(settings), "x-openrtb-version": "2.6"}


def _encoded_headers(settings: Settings) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in headers(settings).items()
    ]


def _json_answer(settings: Settings, body: bytes) -> Answer:
    encoded = _encoded_headers(settings)
    encoded += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    return Answer(200, encoded, body)


def bid_response(settings: Settings, request_id: str, bid: Bid) -> Answer:
    body = BidResponse(
        id=request_id,
        seatbid=[SeatBid(bid=[bid])],
        bidid=str(uuid.uuid4()),
        cur=CURRENCY,
        ext={"platform": deprecation_notice(settings)},
    )
    return _json_answer(settings, _encoder.encode(body))


def no_bid(settings: Settings, request_id: str, nbr: int) -> Answer:
    """200 with an empty seatbid and a reason (resolution mismatch, technical failure)."""
    body = NoBidResponse(id=request_id, seatbid=[], nbr=nbr)
    return _json_answer(settings, _encoder.encode(body))


def no_content(settings: Settings) -> Answer:
    """204: no matching offer, minimum not met, MIME type not allowed; also a stored notice."""
    return Answer(204, _encoded_headers(settings), b"")


def json_document(settings: Settings, document: dict[str, Any]) -> Response[bytes]:
    return Response(_encoder.encode(document), media_type=MediaType.JSON, headers=headers(settings))
