"""The tracking pixel endpoint at the path of TRACKING_BASE_URL, shared by both interfaces.

A validly signed call is recorded once per offer and event (HotState.track, one Lua step with
its record); the same event fired again is answered the same pixel and only counted
(`tracking_event_replays_total{event}`). The OpenRTB `impression` on an open bid bills it,
exactly once however often it fires: spend at the bid price, and a billing record split at the
publisher's commission rate. The answer is a 1x1 transparent GIF, with the OpenRTB interface's
deprecation headers when the offer is an OpenRTB bid; a forged or altered URL gets 403 and
changes nothing.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from litestar import Request, Response, get

from bidder.deprecation import deprecation_headers
from bidder.errors import Forbidden, Unavailable
from bidder.http.web import runtime_of
from bidder.offers import is_test_offer
from bidder.runtime import Runtime, utcnow
from bidder.settings import Settings
from bidder.signing import query_values, verify
from bidder.vast import IMPRESSION_EVENT, TRACKING_SIGNED, macro_value, names_openrtb_macros
from matching.money import split_gross
from store.errors import REDIS_DOWN

PIXEL = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
_PIXEL_HEADERS = {"Cache-Control": "no-store, max-age=0"}


def routes(settings: Settings) -> list[Any]:
    """The endpoint, served at the path of `settings.server.tracking_base_url`."""
    path = settings.server.tracking_path

    @get(path, include_in_schema=False)
    async def track(request: Request[Any, Any, Any]) -> Response[bytes]:
        return await handle_track(request, path)

    return [track]


async def handle_track(request: Request[Any, Any, Any], path: str) -> Response[bytes]:
    rt = runtime_of(request)
    pairs = list(request.query_params.multi_items())
    params = query_values(pairs, TRACKING_SIGNED)
    # A pixel of the deprecated interface says so (contract: Versioning), as every answer of it.
    # Its URL carries the SSP's macros (`price`, `aud`), a Core VAST's does not; the script's
    # answer says it for sure when the offer is still known. Read from the query as sent, so a
    # URL refused for a signed parameter given twice (`params` None) is told too.
    macros = names_openrtb_macros(name for name, _ in pairs)
    deprecated = deprecation_headers(rt.settings) if macros else {}
    if (
        params is None
        or not verify(rt.settings.secrets.signing_secrets, path, params, TRACKING_SIGNED)
        or not params["ts"].isdigit()
    ):
        raise Forbidden("Invalid tracking URL signature", code="INVALID_SIGNATURE", openrtb=macros)
    offer_id, event = params["offer_id"], params["event"]
    if is_test_offer(offer_id):
        # A test bid's pixel (its id is signed): answered, never recorded nor billed.
        return Response(b"", status_code=204, headers=deprecation_headers(rt.settings))
    payload = {
        "event_id": str(uuid.uuid4()),
        "event": event,
        "ts": int(params["ts"]),
        # As a loss notice keeps its macros: what the SSP put in, none if it substituted none.
        "price": macro_value(request.query_params.get("price")),
        "aud": macro_value(request.query_params.get("aud")),
    }
    now = utcnow()
    try:
        billing = await _billing(rt, offer_id) if event == IMPRESSION_EVENT else {}
        tracked = await rt.hot.track(offer_id, event, now, payload, billing)
    except REDIS_DOWN:
        raise Unavailable(
            "The tracking event could not be stored, retry shortly",
            headers={"Retry-After": "1"},
            openrtb=macros,
        ) from None
    if tracked.status == "billed":
        rt.metrics.count_bid_outcome("billed")
    elif tracked.status == "replay":
        rt.metrics.count_tracking_replay(event)
    if tracked.channel == "openrtb" and not deprecated:
        deprecated = deprecation_headers(rt.settings)
    elif tracked.channel == "core":
        deprecated = {}
    return Response(PIXEL, media_type="image/gif", headers={**_PIXEL_HEADERS, **deprecated})


async def _billing(rt: Runtime, offer_id: str) -> dict[str, Any]:
    """The billing payload for an impression of an open OpenRTB bid, else nothing.

    The script bills at the offer's stored price and only while it is open, so reading the
    offer first cannot bill a wrong amount; at worst the payload goes unused.
    """
    offer = await rt.hot.offer(offer_id, hot_path=True)
    if offer is None or offer.get("channel") != "openrtb" or offer.get("status") != "open":
        return {}
    gross = int(offer["price"])
    snapshot = rt.inventory.snapshot
    publisher = snapshot.publishers.get(offer["publisher"]) if snapshot else None
    rate = publisher.commission_rate if publisher else rt.settings.offers.default_commission_rate
    net, commission = split_gross(gross, rate)
    return {
        "billing_id": str(uuid.uuid4()),
        "gross_micros": gross,
        "commission_micros": commission,
        "net_micros": net,
        "commission_rate": str(rate),
    }
