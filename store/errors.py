"""What Redis or Postgres raise when they are down: the outages every caller rides out (a 503,
a retry, a line in the log) instead of answering with a traceback.

Python's `TimeoutError` is an `OSError`, so each tuple with `OSError` covers a timed-out socket
or an expired `asyncio.timeout` too.
"""

from __future__ import annotations

import asyncpg
from redis.exceptions import RedisClusterException, RedisError

#: Redis unreachable, too slow or failing the call: redis-py's own errors (its ConnectionError
#: and TimeoutError among them), its cluster client's (no node of the cluster reachable, a slot
#: no primary serves: RedisClusterException is no RedisError) and the socket's (OSError).
REDIS_DOWN: tuple[type[Exception], ...] = (RedisError, RedisClusterException, OSError)

#: Postgres out of reach: refused, dropped, starting or stopping. Narrower than
#: `POSTGRES_DOWN`: an error the server sends back about a statement is not in it, so what
#: catches only this still reports a failing query as the bug it is.
POSTGRES_UNREACHABLE: tuple[type[Exception], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
)

#: Postgres unreachable or failing a statement: the socket's errors and every error the server
#: sends back (a shutdown, a resource exhausted, a statement cancelled).
POSTGRES_DOWN: tuple[type[Exception], ...] = (OSError, asyncpg.PostgresError)

#: The driver refusing a call because its connection or pool is closed or closing (a worker
#: stopping, a connection lost under it). A misuse of the driver raises it too, so it is not in
#: `POSTGRES_DOWN`: the callers that ride it out as an outage (a request's 503, the record
#: writer's retry) name it besides.
POSTGRES_CLOSED: tuple[type[Exception], ...] = (asyncpg.InterfaceError,)

#: Either store down: what the background loops report, retry and never log as a bug.
OUTAGE: tuple[type[Exception], ...] = (*REDIS_DOWN, *POSTGRES_DOWN)
