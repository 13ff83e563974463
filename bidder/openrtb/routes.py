"""The legacy OpenRTB 2.6 interface (deprecated): bid, loss notice and its OpenAPI document.

Every answer carries `Deprecation: true` and the `Link` to the migration guide; errors come out
as `{error, message, details, deprecated, ...}` through bidder.http.web.error_response.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post, route
from litestar.params import FromPath
from litestar.types import ASGIApp

from bidder.core import authorize_key
from bidder.deprecation import OPENRTB_PREFIX
from bidder.http.web import call_of, runtime_of
from bidder.openrtb._bid import handle_bid
from bidder.openrtb._loss import handle_loss
from bidder.openrtb._openapi import openapi_document
from bidder.openrtb._response import json_document


# Serves only what bidder.http.front passes on to Litestar; the same function either way.
@post([f"{OPENRTB_PREFIX}/bid", f"{OPENRTB_PREFIX}/"], status_code=200)
async def bid(request: Request[Any, Any, Any]) -> ASGIApp:
    """A BidRequest in, a BidResponse (or a no-bid) out."""
    return await handle_bid(runtime_of(request), call_of(request))


@route(f"{OPENRTB_PREFIX}/loss/{{offer_id:str}}", http_method=["GET", "POST"])
async def loss(request: Request[Any, Any, Any], offer_id: FromPath[str]) -> ASGIApp:
    """The signed loss notice URL given in `lurl`."""
    return await handle_loss(request, offer_id)


@get(f"{OPENRTB_PREFIX}/openapi.json", sync_to_thread=False)
def openapi(request: Request[Any, Any, Any]) -> Response[Any]:
    """The OpenAPI 3.0 description of this interface, for a caller with a publisher API key
    (the contract: "All endpoints need the Authorization header"; only the signed loss notice
    is exempt). 401 `INVALID_API_KEY` without one; 503 before the keys are loaded."""
    rt = runtime_of(request)
    authorize_key(rt, request.headers.get("authorization"), code="INVALID_API_KEY")
    return json_document(rt.settings, openapi_document(rt.settings))


routes: list[Any] = [bid, loss, openapi]
