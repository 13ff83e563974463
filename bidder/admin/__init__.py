"""The admin API for operators (routes in `routes`), and what it shares with the CLI: key
issuing and revoking, inventory import, campaign views and top-ups, offer and deal views."""

from bidder.admin._campaigns import (
    CampaignView,
    apply_top_up,
    check_idempotency_key,
    load_campaign,
    read_top_up,
    with_budget,
)
from bidder.admin._inventory import import_inventory
from bidder.admin._keys import KeyCreated, UnknownPublisher, check_expiry, issue_key, revoke_key_id
from bidder.admin.records_routes import RecordSource, deal_view, offer_view

__all__ = [
    "CampaignView",
    "KeyCreated",
    "RecordSource",
    "UnknownPublisher",
    "apply_top_up",
    "check_expiry",
    "check_idempotency_key",
    "deal_view",
    "import_inventory",
    "issue_key",
    "load_campaign",
    "offer_view",
    "read_top_up",
    "revoke_key_id",
    "with_budget",
]
