"""What a correct answer looks like, per endpoint: the checks the Locust scenarios apply to every
response (kept free of Locust so unit tests can hold them to the contract)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

VAST_NS = "{http://www.iab.com/VAST}"
OPENRTB_ERROR_FIELDS = {
    "error",
    "message",
    "details",
    "deprecated",
    "deprecation_message",
    "documentation",
    "migration_guide",
}


def _is_money(value: Any) -> bool:
    return isinstance(value, int | Decimal) and not isinstance(value, bool) and value >= 0


def _first(checks: list[tuple[bool, str]]) -> str | None:
    """The message of the first failed check (`ok` False), or None when every check holds."""
    return next((message for ok, message in checks if not ok), None)


def _iso(value: Any) -> bool:
    try:
        datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def has_text(body: dict[str, Any], name: str) -> bool:
    return isinstance(body.get(name), str) and bool(body[name])


def offer_problem(body: Any) -> str | None:
    """Why a 200 offer body deviates from the contract's Offer object (None when it doesn't)."""
    if not isinstance(body, dict):
        return "offer body is not a JSON object"
    return _first(
        [
            (has_text(body, "offer_id"), "offer_id missing"),
            (
                _is_money(body.get("bid_price_cents")) and body["bid_price_cents"] > 0,
                "bid_price_cents is not a positive number",
            ),
            (str(body.get("asset_url", "")).startswith(("http", "https")), "asset_url no URL"),
            (_iso(body.get("expires_at")), "expires_at is not ISO 8601"),
            (isinstance(body.get("billing_code", 0), str | None), "billing_code missing"),
        ]
    )


def accept_problem(body: Any) -> str | None:
    """Why a 200 accept body deviates from the contract's accept result."""
    if not isinstance(body, dict):
        return "accept body is not a JSON object"
    money: list[Any] = [
        body.get(n) for n in ("net_price_cents", "commission_cents", "gross_price_cents")
    ]
    numbers = all(_is_money(m) for m in money)
    return _first(
        [
            (body.get("success") is True, "success is not true"),
            (body.get("action") == "accepted", "action is not 'accepted'"),
            (
                has_text(body, "deal_id") and has_text(body, "billing_id"),
                "deal_id/billing_id missing",
            ),
            (has_text(body, "message"), "message missing"),
            (numbers, "a price field is not a number"),
            (numbers and money[0] + money[1] == money[2], f"net + commission != gross {money}"),
            ("billing_code" in body, "billing_code missing"),
        ]
    )


def error_problem(body: Any, *, with_status: int | None = None) -> str | None:
    """The Core API error shape: {error} (and `status` for the offer request's 404/422)."""
    if not isinstance(body, dict) or not has_text(body, "error"):
        return "error body without an `error` message"
    if with_status is not None and body.get("status") != with_status:
        return f"error body without status {with_status}"
    return None


def bid_problem(body: Any, request: dict[str, Any]) -> str | None:
    """Why a 200 BidResponse deviates from the contract's table."""
    if not isinstance(body, dict) or body.get("id") != request["id"] or body.get("cur") != "EUR":
        return "BidResponse id does not mirror the request, or cur is not EUR"
    if body.get("seatbid") == []:
        return None if body.get("nbr") in (0, 1) else "empty seatbid without nbr"
    try:
        bid = body["seatbid"][0]["bid"][0]
    except (KeyError, IndexError, TypeError):
        return "no seatbid[0].bid[0]"
    names = ("id", "impid", "adid", "cid", "crid", "adm", "lurl", "dealid")
    return _first(
        [
            (
                all(has_text(bid, n) for n in names),
                "a bid field of " + ", ".join(names) + " missing",
            ),
            (bid.get("adid") == bid.get("cid") == bid.get("crid"), "adid, cid and crid differ"),
            ("nurl" not in bid and "burl" not in bid, "nurl/burl must not be sent"),
            (_is_money(bid.get("price")), "price is not a number"),
            (isinstance(bid.get("adomain"), list), "adomain is not a list"),
            (isinstance(body.get("ext", {}).get("platform"), dict), "ext.platform missing"),
        ]
    )


def impression_url(adm: str, price: Any, audience: float) -> str | None:
    """The VAST <Impression> URL with the SSP macros substituted, as path + query."""
    try:
        root = ET.fromstring(adm)
    except ET.ParseError:
        return None
    found = root.find(f".//{VAST_NS}Impression")
    url = (found.text or "").strip() if found is not None else ""
    if not url:
        return None
    for macro, value in (("AUCTION_PRICE", str(price)), ("TOTAL_IMP", str(audience))):
        url = re.sub(r"\$\{" + macro + r"\}|%24%7B" + macro + r"%7D", value, url)
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def deprecation_problem(response: Any) -> str | None:
    if response.headers.get("Deprecation") != "true":
        return "Deprecation: true header missing"
    if 'rel="deprecation"' not in (response.headers.get("Link") or ""):
        return "Link rel=deprecation header missing"
    return None
