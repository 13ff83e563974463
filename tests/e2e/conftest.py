"""Fixtures of the end-to-end tests (the real `bidder serve` / granian processes on the session's
servers). The servers and the clean slate come from `tests/conftest.py`, shared with the
integration tests; starting and stopping processes is in `tests/support/processes.py`."""
