"""The admin API (docs/contract.md#2-inventory) under /admin/v1, for operators with the ADMIN_TOKEN:
inventory document, publisher API keys, campaign budgets."""

from __future__ import annotations

from typing import Any

from litestar import Router

from bidder.admin import _campaigns, _inventory, _keys, changes_routes
from bidder.admin._common import ADMIN_PREFIX, require_admin

routes: list[Any] = [
    Router(
        path=ADMIN_PREFIX,
        route_handlers=[
            *_inventory.routes,
            *_keys.routes,
            *_campaigns.routes,
            *changes_routes.routes,
        ],
        guards=[require_admin],
    )
]
