"""The Core API (docs/api-core.md; docs/contract.md sections 1 to 5 and 6a): offer request, offer
response, playout confirmation, all under /functions/v1/api with the publisher's Bearer key."""

from __future__ import annotations

from typing import Any

from bidder.core import _answers, _offers, _playout

routes: list[Any] = [*_offers.routes, *_answers.routes, *_playout.routes]
