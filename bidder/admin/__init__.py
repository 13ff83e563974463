"""The admin API for operators (routes in `routes`), and the key issuing it shares with the CLI."""

from bidder.admin._keys import KeyCreated, UnknownPublisher, check_expiry, issue_key

__all__ = ["KeyCreated", "UnknownPublisher", "check_expiry", "issue_key"]
