"""The one private Litestar API the service uses, kept behind this module alone.

`bidder.http.front` answers the hot routes before Litestar's router sees them, and must refuse
an invalid Host header exactly as Litestar's router refuses it on every other route (a 400).
Litestar keeps that check in a private module (`litestar._asgi.utils.is_valid_host`); using
Litestar's own function keeps the two in step, and tests/unit/test_litestar_private.py fails if
a Litestar release moves it, renames it or changes what it accepts.
"""

from litestar._asgi.utils import is_valid_host

__all__ = ["is_valid_host"]
