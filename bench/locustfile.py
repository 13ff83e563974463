"""Locust scenarios for the bench (issue 6): the publisher flow, the SSP flow, demo traffic and
bad input, each response's status AND shape checked (a deviation fails the request).

Run by bench/run.py headless with fixed users and a bounded time; it reads its targets from
BENCH_LOCUST_DATA (written by the runner) and writes what the server acknowledged (accepted
deals, billed impressions, 5xx answers) to BENCH_LOCUST_OUT for the invariants.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from locust import FastHttpUser, between, events, task

from bench.workload import LOSS_MACROS, Target, bid_request, substitute

CORE = "/functions/v1/api"
OPENRTB = "/functions/v1/openrtb-2-6"
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

_lock = threading.Lock()
acknowledged: dict[str, Any] = {
    "accepted_deals": [],
    "impressions_billed": 0,
    "counts": Counter(),
}


def _load_targets() -> tuple[list[Target], list[Target], str]:
    path = os.environ.get("BENCH_LOCUST_DATA")
    if not path:
        return [], [], ""
    with open(path) as source:
        data = json.load(source)
    all_targets = [Target(**t) for t in data["targets"]]
    return all_targets, [t for t in all_targets if t.type == "moving"], data["demo_key"]


TARGETS, MOVING, DEMO_KEY = _load_targets()


def note(kind: str, status: int) -> None:
    with _lock:
        acknowledged["counts"][f"{kind} {status}"] += 1
        if status >= 500:
            acknowledged["counts"]["5xx"] += 1


@events.quitting.add_listener  # type: ignore[untyped-decorator]
def _write_outcome(**_: Any) -> None:
    out = os.environ.get("BENCH_LOCUST_OUT")
    if out:
        with _lock, open(out, "w") as sink:
            json.dump({**acknowledged, "counts": dict(acknowledged["counts"])}, sink)


def _json(response: Any) -> Any:
    try:
        return json.loads(response.content or b"null", parse_float=Decimal)
    except ValueError:
        return None


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


def _text(body: dict[str, Any], name: str) -> bool:
    return isinstance(body.get(name), str) and bool(body[name])


def offer_problem(body: Any) -> str | None:
    """Why a 200 offer body deviates from the contract's Offer object (None when it doesn't)."""
    if not isinstance(body, dict):
        return "offer body is not a JSON object"
    return _first(
        [
            (_text(body, "offer_id"), "offer_id missing"),
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
            (_text(body, "deal_id") and _text(body, "billing_id"), "deal_id/billing_id missing"),
            (_text(body, "message"), "message missing"),
            (numbers, "a price field is not a number"),
            (numbers and money[0] + money[1] == money[2], f"net + commission != gross {money}"),
            ("billing_code" in body, "billing_code missing"),
        ]
    )


def error_problem(body: Any, *, with_status: int | None = None) -> str | None:
    """The Core API error shape: {error} (and `status` for the offer request's 404/422)."""
    if not isinstance(body, dict) or not _text(body, "error"):
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
            (all(_text(bid, n) for n in names), "a bid field of " + ", ".join(names) + " missing"),
            (bid.get("adid") == bid.get("cid") == bid.get("crid"), "adid, cid and crid differ"),
            ("nurl" not in bid and "burl" not in bid, "nurl/burl must not be sent"),
            (_is_money(bid.get("price")), "price is not a number"),
            (isinstance(bid.get("adomain"), list), "adomain is not a list"),
            (isinstance(body.get("ext", {}).get("platform"), dict), "ext.platform missing"),
        ]
    )


def verdict(response: Any, problem: str | None) -> bool:
    """Fail the Locust request when there is a problem; True when the response was right."""
    if problem:
        response.failure(f"{response.status_code}: {problem}")
        return False
    response.success()
    return True


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


class PublisherFlow(FastHttpUser):
    """Offer request; then accept 70% / reject 20% / no answer 10%; playout of the accepted."""

    weight = 5
    wait_time = between(0.02, 0.1)

    @task
    def offer_cycle(self) -> None:
        target = random.choice(TARGETS)
        auth = {"Authorization": f"Bearer {target.api_key}"}
        with self.client.get(
            f"{CORE}/offers/request/{target.screen_id}",
            headers=auth,
            name="offer request",
            catch_response=True,
        ) as response:
            note("offer request", response.status_code)
            body = _json(response)
            if response.status_code == 404:
                verdict(response, error_problem(body, with_status=404))
                return
            problem = "unexpected status" if response.status_code != 200 else offer_problem(body)
            if not verdict(response, problem):
                return
        roll = random.random()
        if roll < 0.7:
            self._accept(body, auth)
        elif roll < 0.9:
            self._reject(body, auth)

    def _accept(self, offer: dict[str, Any], auth: dict[str, str]) -> None:
        with self.client.post(
            f"{CORE}/offers/response/{offer['offer_id']}",
            # the price exactly as offered (a Decimal, so no float rounding on the way back)
            data=f'{{"action":"accept","accepted_price_cents":{offer["bid_price_cents"]}}}',
            headers={**auth, "Content-Type": "application/json"},
            name="accept",
            catch_response=True,
        ) as response:
            note("accept", response.status_code)
            body = _json(response)
            problem = "unexpected status" if response.status_code != 200 else accept_problem(body)
            if not verdict(response, problem):
                return
            with _lock:
                acknowledged["accepted_deals"].append(body["deal_id"])
        with self.client.post(
            f"{CORE}/playout/confirm/{body['deal_id']}",
            json={"duration_seconds": 15, "completion_rate": 100, "player_version": "bench/1"},
            headers=auth,
            name="playout confirm",
            catch_response=True,
        ) as response:
            note("playout", response.status_code)
            answer = _json(response)
            ok = (
                response.status_code == 200
                and isinstance(answer, dict)
                and answer.get("success") is True
                and answer.get("deal_id") == body["deal_id"]
                and _text(answer, "playout_id")
            )
            verdict(response, None if ok else "playout body without success, deal_id, playout_id")

    def _reject(self, offer: dict[str, Any], auth: dict[str, str]) -> None:
        with self.client.post(
            f"{CORE}/offers/response/{offer['offer_id']}",
            json={"action": "reject", "rejection_reason": "no_slot"},
            headers=auth,
            name="reject",
            catch_response=True,
        ) as response:
            note("reject", response.status_code)
            body = _json(response)
            ok = (
                response.status_code == 200
                and isinstance(body, dict)
                and body.get("success") is True
                and body.get("action") == "rejected"
                and body.get("rejection_reason") == "no_slot"
            )
            verdict(response, None if ok else "reject body without action/rejection_reason")


class SspFlow(FastHttpUser):
    """OpenRTB bid; then the loss notice (80%) or the VAST impression pixel (20%)."""

    weight = 4
    wait_time = between(0.02, 0.1)

    @task
    def bid_cycle(self) -> None:
        target = random.choice(MOVING)
        request = bid_request(target, random.Random())
        with self.client.post(
            f"{OPENRTB}/bid",
            data=json.dumps(request),
            headers={
                "Authorization": f"Bearer {target.api_key}",
                "Content-Type": "application/json",
            },
            name="bid",
            catch_response=True,
        ) as response:
            note("bid", response.status_code)
            problem = deprecation_problem(response)
            if response.status_code == 204:
                verdict(response, problem or (None if not response.content else "204 with body"))
                return
            body = _json(response)
            if response.status_code != 200:
                problem = problem or "unexpected status"
            if not verdict(response, problem or bid_problem(body, request)):
                return
        if not body.get("seatbid"):
            return
        bid = body["seatbid"][0]["bid"][0]
        if random.random() < 0.8:
            self._loss(bid["lurl"])
        else:
            self._impression(bid, target.audience)

    def _loss(self, lurl: str) -> None:
        parts = urlsplit(substitute(lurl, LOSS_MACROS))
        with self.client.get(
            parts.path + "?" + parts.query, name="loss notice", catch_response=True
        ) as response:
            note("loss", response.status_code)
            ok = response.status_code == 204 and not response.content
            verdict(response, None if ok else "loss notice not accepted with an empty 204")

    def _impression(self, bid: dict[str, Any], audience: float) -> None:
        url = impression_url(bid["adm"], bid["price"], audience)
        if url is None:
            events.request.fire(  # type: ignore[no-untyped-call]
                request_type="GET",
                name="impression",
                response_time=0,
                response_length=0,
                exception=AssertionError("adm has no <Impression> URL"),
            )
            return
        with self.client.get(url, name="impression", catch_response=True) as response:
            note("impression", response.status_code)
            if verdict(response, None if 200 <= response.status_code < 300 else "not recorded"):
                with _lock:
                    acknowledged["impressions_billed"] += 1


class DemoTraffic(FastHttpUser):
    """The demo screen: the fixed demo offer, accept and playout, nothing stored."""

    weight = 1
    wait_time = between(0.05, 0.2)

    @task
    def demo(self) -> None:
        auth = {"Authorization": f"Bearer {DEMO_KEY}"}
        with self.client.get(
            f"{CORE}/offers/request/test-display-test",
            headers=auth,
            name="demo offer",
            catch_response=True,
        ) as response:
            note("demo", response.status_code)
            body = _json(response)
            problem = "unexpected status" if response.status_code != 200 else offer_problem(body)
            if not problem and (
                body["offer_id"] != "test-offer-test"
                or body["bid_price_cents"] != Decimal("2.5")
                or body["billing_code"] != "DEMO-BILL-001"
            ):
                problem = "not the fixed demo offer"
            if not verdict(response, problem):
                return
        with self.client.post(
            f"{CORE}/offers/response/test-offer-test",
            json={"action": "accept", "accepted_price_cents": 2.5},
            headers=auth,
            name="demo accept",
            catch_response=True,
        ) as response:
            note("demo", response.status_code)
            body = _json(response)
            problem = "unexpected status" if response.status_code != 200 else accept_problem(body)
            if not problem and body["deal_id"] != "test-deal-test":
                problem = "demo accept without deal test-deal-test"
            if not verdict(response, problem):
                return
        with self.client.post(
            f"{CORE}/playout/confirm/test-deal-test",
            json={},
            headers=auth,
            name="demo playout",
            catch_response=True,
        ) as response:
            note("demo", response.status_code)
            verdict(response, None if response.status_code == 200 else "demo playout refused")


class BadInput(FastHttpUser):
    """Bad input mixed in: each must get its documented 4xx and error shape, never a 5xx."""

    weight = 1
    wait_time = between(0.05, 0.2)

    def _expect(
        self, name: str, response: Any, status: int | tuple[int, ...], openrtb: bool = False
    ) -> None:
        note(name, response.status_code)
        allowed = (status,) if isinstance(status, int) else status
        body = _json(response)
        if response.status_code not in allowed:
            response.failure(f"{response.status_code} instead of {allowed}")
        elif openrtb and (not isinstance(body, dict) or set(body) != OPENRTB_ERROR_FIELDS):
            response.failure("OpenRTB error body without the documented fields")
        elif not openrtb and response.status_code not in (403, 204) and error_problem(body):
            response.failure(str(error_problem(body)))
        else:
            response.success()

    @task
    def bad_min_bid(self) -> None:
        target = random.choice(TARGETS)
        with self.client.get(
            f"{CORE}/offers/request/{target.screen_id}?min_bid_cents=lots",
            headers={"Authorization": f"Bearer {target.api_key}"},
            name="bad: min_bid_cents",
            catch_response=True,
        ) as response:
            self._expect("bad", response, (400, 422))

    @task
    def bad_action(self) -> None:
        target = random.choice(TARGETS)
        with self.client.post(
            f"{CORE}/offers/response/00000000-0000-4000-8000-000000000000",
            json={"action": "decline", "decline_reason": "old example"},
            headers={"Authorization": f"Bearer {target.api_key}"},
            name="bad: action",
            catch_response=True,
        ) as response:
            self._expect("bad", response, (400, 404))

    @task
    def malformed_json(self) -> None:
        target = random.choice(TARGETS)
        with self.client.post(
            f"{CORE}/offers/response/00000000-0000-4000-8000-000000000000",
            data="{not json",
            headers={
                "Authorization": f"Bearer {target.api_key}",
                "Content-Type": "application/json",
            },
            name="bad: malformed json",
            catch_response=True,
        ) as response:
            self._expect("bad", response, (400, 404))

    @task
    def bad_key(self) -> None:
        with self.client.post(
            f"{CORE}/offers/response/00000000-0000-4000-8000-000000000000",
            json={"action": "reject"},
            headers={"Authorization": "Bearer dk_stg_not-a-key"},
            name="bad: api key",
            catch_response=True,
        ) as response:
            self._expect("bad", response, 401)
            if _json(response) != {"error": "Invalid or expired API key"}:
                response.failure("401 body is not exactly {error: Invalid or expired API key}")

    @task
    def multi_imp(self) -> None:
        target = random.choice(MOVING)
        request = bid_request(target, random.Random())
        request["imp"] = [request["imp"][0], {**request["imp"][0], "id": "2"}]  # type: ignore[index]
        with self.client.post(
            f"{OPENRTB}/bid",
            data=json.dumps(request),
            headers={
                "Authorization": f"Bearer {target.api_key}",
                "Content-Type": "application/json",
            },
            name="bad: two imps",
            catch_response=True,
        ) as response:
            self._expect("bad", response, 400, openrtb=True)
            body = _json(response)
            if isinstance(body, dict) and body.get("error") != "MULTI_IMP_NOT_SUPPORTED":
                response.failure("error is not MULTI_IMP_NOT_SUPPORTED")

    @task
    def bid_without_key(self) -> None:
        with self.client.post(
            f"{OPENRTB}/bid",
            data="{}",
            headers={"Content-Type": "application/json"},
            name="bad: bid without key",
            catch_response=True,
        ) as response:
            self._expect("bad", response, 401, openrtb=True)

    @task
    def forged_loss(self) -> None:
        with self.client.get(
            f"{OPENRTB}/loss/00000000-0000-4000-8000-000000000000"
            "?pub=x&scr=y&ts=1&token=forged&reason=102",
            name="bad: forged loss notice",
            catch_response=True,
        ) as response:
            self._expect("bad", response, 403)


__all__ = ["BadInput", "DemoTraffic", "PublisherFlow", "SspFlow", "impression_url"]
