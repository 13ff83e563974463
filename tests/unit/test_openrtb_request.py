"""BidRequest validation without a server (docs/contract.md#6-openrtb-path): the leaf types each
rule takes, JSON `true` never counting as a number, and bodies that are not UTF-8 being malformed
JSON."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from bidder.errors import BadRequest
from bidder.openrtb import parse_bid_request, request_id_of
from matching.money import MICROS_PER_CENT, openrtb_min_bid_micros


def body(**changes: Any) -> dict[str, Any]:
    imp: dict[str, Any] = {
        "id": "imp-1",
        "tagid": "ext-1",
        "video": {"w": 1920, "h": 1080, "mimes": [" Video/MP4 "]},
        "pmp": {"deals": [{"id": "deal-7", "bidfloor": 1.5, "at": 3}]},
        "qty": {"multiplier": 119.47},
    }
    request: dict[str, Any] = {"id": "auction-1", "at": 3, "imp": [imp]}
    for path, value in changes.items():
        node: Any = request
        *parents, last = path.split("__")
        for step in parents:
            node = node[int(step)] if step.isdigit() else node[step]
        node[int(last) if last.isdigit() else last] = value
    return request


def code_of(raw: bytes) -> str:
    with pytest.raises(BadRequest) as caught:
        parse_bid_request(raw)
    return caught.value.code


def test_a_valid_request_reads_as_decimals() -> None:
    ask = parse_bid_request(json.dumps(body()).encode())
    assert (ask.request_id, ask.imp_id, ask.tagid, ask.deal_id) == (
        "auction-1",
        "imp-1",
        "ext-1",
        "deal-7",
    )
    assert (ask.width, ask.height) == (1920, 1080)
    assert ask.mimes == frozenset({"video/mp4"})
    assert ask.bidfloor == Decimal("1.5")
    assert ask.audience == Decimal("119.47")
    assert type(ask.audience) is Decimal


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"at": True}, "NOT_FIXED_PRICE"),
        ({"at": 3.0}, "NOT_FIXED_PRICE"),
        ({"imp__0__pmp__deals__0__at": True}, "NOT_FIXED_PRICE"),
        ({"imp__0__video__w": True}, "NO_RESOLUTION"),
        ({"imp__0__video__h": 1080.0}, "NO_RESOLUTION"),
        ({"imp__0__video__w": "1920"}, "NO_RESOLUTION"),
        ({"imp__0__video__mimes": ["video/mp4", 4]}, "INVALID_REQUEST"),
        ({"imp__0__video__mimes": "video/mp4"}, "INVALID_REQUEST"),
        ({"imp__0__pmp__deals__0__id": 7}, "NO_PMP_DEALS"),
        ({"imp__0__pmp__deals__0__bidfloor": True}, "NO_PMP_DEALS"),
        ({"imp__0__pmp__deals__0__bidfloor": "1.5"}, "NO_PMP_DEALS"),
        ({"imp__0__qty__multiplier": True}, "NO_TOTAL_AUDIENCE"),
        ({"imp__0__qty__multiplier": "119"}, "NO_TOTAL_AUDIENCE"),
        ({"imp__0__id": 1}, "INVALID_REQUEST"),
        ({"id": ""}, "INVALID_REQUEST"),
    ],
)
def test_each_rule_takes_only_its_type(changes: dict[str, Any], code: str) -> None:
    assert code_of(json.dumps(body(**changes)).encode()) == code


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        # The contract (docs/contract.md#6-openrtb-path) puts only malformed JSON before its codes:
        # a request without its ids (or with an unreadable `mimes`) meets every rule first.
        ({"id": None, "imp": [{}, {}]}, "MULTI_IMP_NOT_SUPPORTED"),
        ({"id": None, "imp__0__id": None, "at": 1}, "NOT_FIXED_PRICE"),
        ({"imp__0__id": None, "imp__0__tagid": None}, "NO_EXTERNAL_SCREEN_ID"),
        ({"id": None, "imp__0__video__w": 0}, "NO_RESOLUTION"),
        ({"imp__0__video__mimes": 4, "imp__0__pmp__deals": []}, "NO_PMP_DEALS"),
        ({"imp__0__id": None, "imp__0__qty__multiplier": 0}, "NO_TOTAL_AUDIENCE"),
        # ... and is INVALID_REQUEST when it meets them all.
        ({"id": None}, "INVALID_REQUEST"),
        ({"imp__0__id": None}, "INVALID_REQUEST"),
        ({"imp__0__video__mimes": 4}, "INVALID_REQUEST"),
    ],
)
def test_the_documented_codes_come_before_the_ids(changes: dict[str, Any], code: str) -> None:
    assert code_of(json.dumps(body(**changes)).encode()) == code


def test_integer_numbers_are_accepted_where_a_number_is_wanted() -> None:
    raw = body(imp__0__pmp__deals__0__bidfloor=0, imp__0__qty__multiplier=120)
    ask = parse_bid_request(json.dumps(raw).encode())
    assert (ask.bidfloor, ask.audience) == (Decimal(0), Decimal(120))


@pytest.mark.parametrize(
    "raw", [b'{"id": "auction-\xff", "at": 3, "imp": []}', b'{"id": "a\xed\xa0\xbd", "imp": []}']
)
def test_a_string_that_is_not_utf8_is_malformed_json(raw: bytes) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_bid_request(raw)
    assert caught.value.code == "INVALID_REQUEST"
    assert caught.value.message == "The body is not valid JSON"
    assert request_id_of(raw) == ""


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"imp": {"id": "imp-1"}}, "MULTI_IMP_NOT_SUPPORTED"),
        ({"imp": "x"}, "MULTI_IMP_NOT_SUPPORTED"),
        ({"imp": ["x"]}, "NO_EXTERNAL_SCREEN_ID"),  # an imp[0] that is no object holds nothing
        ({"imp__0__video": "x"}, "NO_VIDEO_OBJECT"),
        ({"imp__0__video": []}, "NO_VIDEO_OBJECT"),
        ({"imp__0__pmp": "x"}, "NO_PMP_DEALS"),
        ({"at": 1, "imp__0__pmp": "x"}, "NOT_FIXED_PRICE"),
        ({"imp__0__tagid": "", "imp__0__video": 5}, "NO_EXTERNAL_SCREEN_ID"),
        ({"imp__0__qty": 119, "imp__0__ext": {"totalaud": 119}}, "NO_TOTAL_AUDIENCE"),
        ({"imp__0__qty": None, "imp__0__ext": [119]}, "NO_TOTAL_AUDIENCE"),
        # An empty video object is a video object, on either path
        ({"imp__0__video": {}}, "NO_RESOLUTION"),
        ({"imp__0__video": {}, "imp__0__pmp": "x"}, "NO_RESOLUTION"),
    ],
)
def test_a_container_of_the_wrong_type_counts_against_its_rule(
    changes: dict[str, Any], code: str
) -> None:
    """The contract (docs/contract.md#6-openrtb-path) keeps INVALID_REQUEST for malformed JSON:
    a well-formed body whose `video` is a string has no video object, which its own rule
    reports."""
    assert code_of(json.dumps(body(**changes)).encode()) == code


@pytest.mark.parametrize("imps", [3, 100_000])
def test_the_impressions_are_counted_whatever_their_type(imps: int) -> None:
    raw = json.dumps(body(imp=[body()["imp"][0], "x", *[7] * (imps - 2)])).encode()
    with pytest.raises(BadRequest) as caught:
        parse_bid_request(raw)
    assert (caught.value.code, caught.value.details) == (
        "MULTI_IMP_NOT_SUPPORTED",
        {"imp_count": imps},
    )


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id": "a", "at": 3, "imp": "x", ',
        b'{"id": "a", "imp": {"id": 1}, "x": NaN}',
        b'{"id": "a", "imp": 5, "x": [1, 2}',
    ],
)
def test_a_body_malformed_after_a_wrong_type_is_still_malformed(raw: bytes) -> None:
    """The typed decode stops at the type error; the rest of the body must be read too."""
    assert code_of(raw) == "INVALID_REQUEST"


def test_a_body_that_is_not_an_object_is_invalid() -> None:
    for raw in (b"[]", b'"x"', b"3", b"null"):
        assert code_of(raw) == "INVALID_REQUEST"


_HUGE = "9" * 5000  # well-formed JSON; msgspec refuses an integer past about 1e308


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("at", "NOT_FIXED_PRICE"),
        ("imp__0__pmp__deals__0__at", "NOT_FIXED_PRICE"),
        ("imp__0__video__w", "NO_RESOLUTION"),
        ("imp__0__video__h", "NO_RESOLUTION"),
        ("imp__0__qty__multiplier", "NO_TOTAL_AUDIENCE"),
    ],
)
def test_a_huge_integer_is_judged_by_its_rule_not_called_malformed(path: str, code: str) -> None:
    """docs/contract.md#6-openrtb-path: only malformed JSON is INVALID_REQUEST; a 5,000-digit
    integer (which msgspec refuses as "Integer value out of range") meets its rule, as `1e400`
    does."""
    raw = json.dumps(body(**{path: "@@huge@@"})).replace('"@@huge@@"', _HUGE).encode()
    assert code_of(raw) == code


def test_a_huge_floor_is_a_floor_and_the_other_numbers_stay_integers() -> None:
    raw = json.dumps(body(imp__0__pmp__deals__0__bidfloor="@@huge@@"))
    ask = parse_bid_request(raw.replace('"@@huge@@"', _HUGE).encode())
    assert ask.bidfloor == Decimal(_HUGE)
    assert (ask.width, ask.height) == (1920, 1080)
    assert type(ask.width) is int


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_the_slow_path_still_refuses_what_json_does_not_allow(constant: bytes) -> None:
    """Python's json reads NaN and Infinity; JSON has neither (else: MULTI_IMP_NOT_SUPPORTED)."""
    raw = b'{"id": "a", "at": ' + _HUGE.encode() + b', "imp": [], "x": ' + constant + b"}"
    assert code_of(raw) == "INVALID_REQUEST"


def test_a_huge_integer_beside_a_huge_exponent_is_judged_too() -> None:
    """The big-integer path decoded floats with Decimal itself, which raises InvalidOperation
    on a 19-digit exponent: a 500."""
    raw = json.dumps(body(at="@@huge@@", imp__0__pmp__deals__0__x="@@exp@@"))
    raw = raw.replace('"@@huge@@"', _HUGE).replace('"@@exp@@"', "1e99999999999999999999")
    assert code_of(raw.encode()) == "NOT_FIXED_PRICE"


def test_the_minimum_bid_uses_the_audience_as_sent() -> None:
    """The price uses the audience to 18 decimals; the floor must not: 10 EUR CPM x
    1.0000000000000000004 / 10 is just over 1 cent, so 2 cents (1 from the rounded one)."""
    raw = json.dumps(body(imp__0__pmp__deals__0__bidfloor=10, imp__0__qty__multiplier="@@a@@"))
    ask = parse_bid_request(raw.replace('"@@a@@"', "1.0000000000000000004").encode())
    assert ask.audience == Decimal("1.000000000000000000")
    assert openrtb_min_bid_micros(ask.bidfloor, ask.floor_audience) == 2 * MICROS_PER_CENT


def test_an_audience_that_rounds_up_to_the_bound_is_refused_by_its_rule() -> None:
    """Below 10000000000 as sent, 10000000000 once kept to 18 decimals (29 digits, more than
    Decimal keeps): refused by the audience's rule, not a 500."""
    raw = json.dumps(body(imp__0__qty__multiplier="@@a@@"))
    assert code_of(raw.replace('"@@a@@"', "9999999999.9999999999999999999").encode()) == (
        "NO_TOTAL_AUDIENCE"
    )


def test_a_huge_exponent_alone_is_read_as_the_furthest_decimal_holds() -> None:
    """`1e99999999999999999999` in a field no rule reads leaves the request valid."""
    raw = json.dumps(body(imp__0__pmp__deals__0__x="@@exp@@", imp__0__y="@@tiny@@"))
    raw = raw.replace('"@@exp@@"', "1e99999999999999999999").replace(
        '"@@tiny@@"', "-1e-99999999999999999999"
    )
    assert parse_bid_request(raw.encode()).imp_id == "imp-1"


def test_a_compact_body_and_a_spaced_one_read_alike() -> None:
    spaced = json.dumps(body())
    compact = json.dumps(body(), separators=(",", ":"))
    assert parse_bid_request(spaced.encode()) == parse_bid_request(compact.encode())


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("id", "INVALID_REQUEST"),
        ("imp__0__id", "INVALID_REQUEST"),
        ("imp__0__tagid", "NO_EXTERNAL_SCREEN_ID"),
        ("imp__0__pmp__deals__0__id", "NO_PMP_DEALS"),
    ],
)
def test_ids_hold_at_most_256_characters(path: str, code: str) -> None:
    """docs/api-openrtb.md, "Limits": each id is 1 to 256 characters, else its rule's code."""
    assert code_of(json.dumps(body(**{path: "é" * 257})).encode()) == code
    ask = parse_bid_request(json.dumps(body(**{path: "é" * 256})).encode())
    assert "é" * 256 in (ask.request_id, ask.imp_id, ask.tagid, ask.deal_id)


def test_an_id_above_the_limit_is_not_echoed_in_a_no_bid() -> None:
    assert request_id_of(json.dumps(body(id="a" * 256)).encode()) == "a" * 256
    assert request_id_of(json.dumps(body(id="a" * 257)).encode()) == ""


@pytest.mark.parametrize(
    ("at", "shown"),
    [
        (1, 1),
        ("x", "x"),
        ("x" * 100_000, "x" * 64 + "..."),
        ({"a": [1, 2]}, '{"a":[1,2]}'),
        ([0] * 1000, "[" + "0," * 31 + "0..."),
    ],
)
def test_a_refused_auction_type_is_repeated_as_sent_or_cut(at: Any, shown: Any) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_bid_request(json.dumps(body(at=at)).encode())
    assert caught.value.code == "NOT_FIXED_PRICE"
    assert caught.value.details == {"at": shown}


def test_an_integer_of_thousands_of_digits_is_not_repeated_whole() -> None:
    raw = json.dumps(body()).replace('"at": 3', '"at": ' + "9" * 5000, 1).encode()
    with pytest.raises(BadRequest) as caught:
        parse_bid_request(raw)
    shown = caught.value.details["at"]
    assert shown == "9" * 64 + "..."  # text: many JSON readers refuse 5,000 digits
