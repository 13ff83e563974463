"""The admin API for operators (routes in `routes`), and the key issuing it shares with the CLI."""

from bidder.admin._keys import UnknownPublisher, issue_key

__all__ = ["UnknownPublisher", "issue_key"]
