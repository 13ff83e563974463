"""The Core API for publishers' players: offer requests and responses and playout confirmations
(`routes`), publisher screens (`screens`) and the interface's OpenAPI document (`openapi`).

Offered to the rest of the service: the hot routes' paths and functions, which
`bidder.http.front` serves in front of Litestar, and `authorize_key`, with which the OpenRTB
interface takes the same API keys.
"""

from bidder.core._answers import OFFER_RESPONSE, answer_offer
from bidder.core._common import CORE_PREFIX, authorize_key
from bidder.core._offers import (
    OFFER_BY_EXTERNAL_ID,
    OFFER_BY_SCREEN_ID,
    offer_by_external_id,
    offer_by_screen_id,
)

__all__ = [
    "CORE_PREFIX",
    "OFFER_BY_EXTERNAL_ID",
    "OFFER_BY_SCREEN_ID",
    "OFFER_RESPONSE",
    "answer_offer",
    "authorize_key",
    "offer_by_external_id",
    "offer_by_screen_id",
]
