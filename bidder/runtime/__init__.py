"""What one worker process holds: connections, the current snapshot, the budget view, and the
background loops that keep them fresh."""

from bidder.runtime.budgets import Budgets
from bidder.runtime.clock import utcnow
from bidder.runtime.core import Runtime
from bidder.runtime.inventory import InventoryLoader
from bidder.runtime.loops import Loops, parent_loop
from bidder.runtime.postgres import PostgresHandle

__all__ = [
    "Budgets",
    "InventoryLoader",
    "Loops",
    "PostgresHandle",
    "Runtime",
    "parent_loop",
    "utcnow",
]
