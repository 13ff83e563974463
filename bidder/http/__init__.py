"""The HTTP edge: how a request reaches an interface and how its answer leaves.

- `asgi`: the bare request (`HttpCall`) and answer (`Answer`), and the request body's deadline;
- `web`: a request's runtime and Postgres connection, and every error in its interface's shape;
- `front`: the hot routes, served in front of Litestar;
- `app`: the Litestar application (`create_app`; `app_from_env` is the factory granian runs);
- `health`: `/readyz`; `guides`: the integration guides under `/docs/`;
- `litestar_private`: the one private Litestar API the service uses.

This door offers the plumbing the interfaces (`bidder.core`, `bidder.openrtb`, `bidder.admin`,
`bidder.tracking`) answer through. `create_app` and `Front` assemble those interfaces, which
import this package, so they are imported from their own modules (`bidder.http.app`,
`bidder.http.front`) rather than from here.
"""

from bidder.http.asgi import (
    Answer,
    HttpCall,
    bounded_receive,
    encode_headers,
    is_json,
    json_answer,
)
from bidder.http.web import (
    answering_pool,
    call_of,
    error_answer,
    error_response,
    iso_utc,
    postgres,
    postgres_unavailable,
    runtime_of,
    unexpected_error,
)

__all__ = [
    "Answer",
    "HttpCall",
    "answering_pool",
    "bounded_receive",
    "call_of",
    "encode_headers",
    "error_answer",
    "error_response",
    "is_json",
    "iso_utc",
    "json_answer",
    "postgres",
    "postgres_unavailable",
    "runtime_of",
    "unexpected_error",
]
