"""A Postgres that accepts connections and never answers (a SIGSTOPped or blackholed server)
must not hold an instance's answers: /readyz stays 200 with `"postgres": "unresponsive"`
(docs/contract.md#8-operations), and the admin and screens endpoints answer 503 with
`Retry-After: 1` at once (docs/decisions.md) instead of waiting on the frozen server.

The session's Postgres is left alone: the app reaches it through a proxy of this module's own,
which forwards until it is frozen and then holds every byte while keeping every socket open.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from litestar.testing import AsyncTestClient

from bidder.http.app import create_app
from tests.support.admin import ADMIN, Client, bearer
from tests.support.factories import PUB, basic_document, make_key, seed
from tests.support.servers import ServerUrls, make_settings, wait_for_inventory

SCREENS = "/functions/v1/api/screens"
#: What "answers at once" means here: the service waits about 0.5 s for Postgres, far below
#: the pool's command_timeout (60 s), which would otherwise hold /readyz and the screens list.
PROMPT_SECONDS = 2.0

T = TypeVar("T")


class FreezableProxy:
    """A TCP proxy to one server, on a thread and event loop of its own: the test client runs
    the app on another thread and blocks the test's loop while a request is served.

    `freeze()` stops forwarding both ways and holds new connections unanswered, with every
    socket left open, as a stopped postmaster and its backends do; `close()` drops it all.
    """

    def __init__(self, target_url: str) -> None:
        target = urlsplit(target_url)
        self._target = (target.hostname or "127.0.0.1", target.port or 5432)
        self._target_url = target
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._flowing = asyncio.Event()
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._closed = False
        self.url = ""

    def start(self) -> None:
        self._thread.start()
        port = self._run(self._listen())
        userinfo, _, _ = self._target_url.netloc.rpartition("@")
        netloc = f"{userinfo}@127.0.0.1:{port}" if userinfo else f"127.0.0.1:{port}"
        self.url = urlunsplit(self._target_url._replace(netloc=netloc))

    def freeze(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def thaw(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.set)

    def close(self) -> None:
        """Drop every connection and stop: whoever waits on the server sees it gone."""
        if self._closed:
            return
        self._closed = True
        self._run(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(5)

    async def _listen(self) -> int:
        self._flowing.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        for task in self._connections:
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(client_out)
        try:
            await self._flowing.wait()  # frozen: accepted, and nobody answers
            server_in, server_out = await asyncio.open_connection(*self._target)
            self._writers.add(server_out)
            await asyncio.gather(
                self._pump(client_in, server_out), self._pump(server_in, client_out)
            )
        except (OSError, asyncio.CancelledError):
            pass  # dropped, or cancelled by close(): asyncio's stream callback would log either
        finally:
            client_out.transport.abort()
            self._connections.discard(task)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        finally:
            sink.transport.abort()


@pytest.fixture
async def proxied_app(
    servers: ServerUrls, clean: None
) -> AsyncIterator[tuple[Client, FreezableProxy]]:
    """The app, seeded and loaded, on a proxy to the session's Postgres (still forwarding)."""
    await seed(servers.database_url, basic_document())
    proxy = FreezableProxy(servers.database_url)
    proxy.start()
    try:
        app = create_app(make_settings(servers, DATABASE_URL=proxy.url, RECORD_WRITER="0"))
        async with AsyncTestClient(app) as client:
            try:
                await wait_for_inventory(client)
                yield client, proxy
            finally:
                proxy.thaw()  # before the app stops, so its shutdown meets no frozen server
    finally:
        proxy.close()


async def _timed(client: Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    started = time.monotonic()
    response = await client.request(method, path, **kwargs)
    elapsed = time.monotonic() - started
    assert elapsed < PROMPT_SECONDS, f"{method} {path} took {elapsed:.1f} s"
    return response


async def test_readyz_answers_at_once_while_postgres_is_unresponsive(
    proxied_app: tuple[Client, FreezableProxy],
) -> None:
    client, proxy = proxied_app
    before = await _timed(client, "GET", "/readyz")
    assert (before.status_code, before.json()["postgres"]) == (200, "ok")

    proxy.freeze()
    for _ in range(3):  # later probes reuse the one still waiting
        ready = await _timed(client, "GET", "/readyz")
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["postgres"] == "unresponsive"
        assert body["redis"] == "ok"
        assert body["inventory"]["status"] == "ok"
        assert body["status"] == "ready"
        assert set(body) == set(before.json())
    head = await _timed(client, "HEAD", "/readyz")
    assert (head.status_code, head.content) == (200, b"")
    probes = client.blocking_portal.call(_postgres_probes)
    assert probes == 1, f"{probes} liveness probes in flight"

    proxy.thaw()  # the waiting probe gets its answer
    deadline = time.monotonic() + 5
    while (await _timed(client, "GET", "/readyz")).json()["postgres"] != "ok":
        assert time.monotonic() < deadline, "postgres never ok again after the thaw"
        await asyncio.sleep(0.1)


async def _postgres_probes() -> int:
    """How many Postgres liveness probes run on the app's loop."""
    return sum(
        1
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "") == "PostgresHandle.probe"
    )


async def test_admin_and_screens_answer_503_while_postgres_is_unresponsive(
    proxied_app: tuple[Client, FreezableProxy], servers: ServerUrls
) -> None:
    client, proxy = proxied_app
    key = await make_key(servers.database_url, PUB)
    await wait_for_inventory(client)
    publisher = bearer(key)
    assert (await _timed(client, "GET", SCREENS, headers=publisher)).status_code == 200
    assert (await _timed(client, "GET", "/admin/v1/inventory", headers=ADMIN)).status_code == 200

    proxy.freeze()
    for path, headers in (
        (SCREENS, publisher),  # publisher screens: bidder.http.web.postgres
        ("/admin/v1/inventory", ADMIN),  # admin: bidder.http.web.postgres
        (f"/admin/v1/deals/{uuid.uuid4()}", ADMIN),  # admin records: records_routes._fetch
    ):
        response = await _timed(client, "GET", path, headers=headers)
        assert response.status_code == 503, (path, response.text)
        assert response.headers["retry-after"] == "1"
        assert set(response.json()) == {"error"}
