"""What one worker process holds: connections, the current snapshot, the budget view, and the
background loops that keep them fresh."""

from bidder.runtime.core import Runtime, utcnow

__all__ = ["Runtime", "utcnow"]
