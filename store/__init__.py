"""Every I/O of the service: Redis (the hot state, `store.hot`) and Postgres (the records, the
inventory), each behind its own module; `matching` stays pure and `bidder` calls these.

Its public modules:

- `store.errors`: what Redis or Postgres raise when they are down (also exported here);
- `store.hot`: the hot state in Redis (keys, ids and clocks, the inventory copy, the scripts);
- `store.pipelined`: the auto-pipelined Redis connection of the hot path;
- `store.postgres`: the Postgres pool, migrations and connection errors;
- `store.inventory_repo`: the inventory in Postgres (campaigns, screens, keys, versions);
- `store.record_rows`: the queue entries as Postgres rows;
- `store.records`: the record writer, from the Redis queues into Postgres;
- `store.reconcile`: the budget check of Redis against Postgres;
- `store.local_servers`: Redis and Postgres started locally, for development and tests.
"""

from store.errors import OUTAGE, POSTGRES_CLOSED, POSTGRES_DOWN, POSTGRES_UNREACHABLE, REDIS_DOWN

__all__ = [
    "OUTAGE",
    "POSTGRES_CLOSED",
    "POSTGRES_DOWN",
    "POSTGRES_UNREACHABLE",
    "REDIS_DOWN",
    "errors",
    "hot",
    "inventory_repo",
    "local_servers",
    "pipelined",
    "postgres",
    "reconcile",
    "record_rows",
    "records",
]
