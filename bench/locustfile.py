"""Locust scenarios for the bench: the publisher flow, the SSP flow, demo traffic and
bad input, each response's status AND shape checked (a deviation fails the request).

Run by bench/run.py headless with fixed users and a bounded time; it reads its targets from
BENCH_LOCUST_DATA (written by the runner) and writes what the server acknowledged (accepted
deals, billed impressions, 5xx answers) to BENCH_LOCUST_OUT for the invariants.
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections import Counter
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from locust import FastHttpUser, between, events, task

from bench.shapes import (
    OPENRTB_ERROR_FIELDS,
    accept_problem,
    bid_problem,
    deprecation_problem,
    error_problem,
    has_text,
    impression_url,
    offer_problem,
)
from bench.workload import LOSS_MACROS, Target, bid_request, substitute

CORE = "/functions/v1/api"
OPENRTB = "/functions/v1/openrtb-2-6"

_lock = threading.Lock()
acknowledged: dict[str, Any] = {
    "accepted_deals": [],
    "impressions_billed": 0,
    "playouts": 0,
    "rejections": 0,
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


def verdict(response: Any, problem: str | None) -> bool:
    """Fail the Locust request when there is a problem; True when the response was right."""
    if problem:
        response.failure(f"{response.status_code}: {problem}")
        return False
    response.success()
    return True


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
                and has_text(answer, "playout_id")
            )
            if verdict(response, None if ok else "playout without success, deal_id, playout_id"):
                with _lock:
                    acknowledged["playouts"] += 1

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
            if verdict(response, None if ok else "reject body without action/rejection_reason"):
                with _lock:
                    acknowledged["rejections"] += 1


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
        request["imp"] = [request["imp"][0], {**request["imp"][0], "id": "2"}]
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
