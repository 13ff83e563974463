"""The legacy OpenRTB 2.6 interface (deprecated, kept for SSPs that have not migrated): the bid,
the loss notice and the interface's OpenAPI document (`routes`).

Offered to the rest of the service: `handle_bid`, which `bidder.http.front` serves in front of
Litestar, and the pure pieces of the bid path (parsing a bid request, the signed loss-notice
URL, the answers) that the bench times and the tests check on their own.
"""

from bidder.openrtb._bid import handle_bid
from bidder.openrtb._loss import loss_url
from bidder.openrtb._request import location_of, parse_bid_request, request_id_of, venue_types_of
from bidder.openrtb._response import Bid, bid_response, new_uuid, no_bid, no_content

__all__ = [
    "Bid",
    "bid_response",
    "handle_bid",
    "location_of",
    "loss_url",
    "new_uuid",
    "no_bid",
    "no_content",
    "parse_bid_request",
    "request_id_of",
    "venue_types_of",
]
