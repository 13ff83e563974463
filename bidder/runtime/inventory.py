"""The worker's inventory: the snapshot built from Postgres, reloaded when its version moves,
and the signed copy kept in Redis for a worker that starts while Postgres is down (see
docs/decisions.md, "A copy of the inventory in Redis")."""

from __future__ import annotations

import asyncio
import gc
import logging

import asyncpg
import msgspec

from bidder.observability import Metrics
from bidder.runtime.postgres import PostgresHandle
from bidder.settings import Settings
from bidder.signing import signer, token_verifies
from matching.inventory import InventoryDocument
from matching.snapshot import ApiKeyInfo, Snapshot, build_snapshot
from store.errors import OUTAGE, REDIS_DOWN
from store.hot import (
    INVENTORY_COPY_FORMAT,
    HotState,
    InventoryCopies,
    copy_stamp,
    decode_inventory_copy,
    encode_inventory_copy,
)
from store.inventory_repo import current_version, export_document, load_api_keys

__all__ = ["InventoryLoader"]

log = logging.getLogger("bidder.runtime")

# Reloads in a row whose sync left a newer top-up's total alone (HotState.sync_inventory)
# before the next one writes every total. Normally the next version's reload writes it; a stamp
# no version catches up with means Postgres was restored to an older version.
_MAX_KEEPING_RELOADS = 3
#: Failures to read the inventory from Postgres that are a deploy's mistake, not an outage: a
#: worker does not serve the Redis copy on them (it stays unready, as a bad deploy should).
_MISCONFIGURED = (asyncpg.InvalidAuthorizationSpecificationError, asyncpg.InvalidCatalogNameError)


class InventoryLoader:
    """Holds `snapshot`, which handlers read and a reload replaces whole, and where it came
    from (`source`): "postgres", or "redis copy" (`load_copy`)."""

    def __init__(
        self, settings: Settings, postgres: PostgresHandle, hot: HotState, metrics: Metrics
    ) -> None:
        self.settings = settings
        self.postgres = postgres
        self.hot = hot
        #: Where this worker keeps and finds the signed inventory copy, over the same client.
        self.copies = InventoryCopies(hot.redis)
        self.metrics = metrics
        self.snapshot: Snapshot | None = None
        self.source = "postgres"
        self._copy_problem: str | None = None  # what keeping the copy last failed on
        self._refused_copy: str | None = None  # the stamp of a copy found unusable
        # Which secret signs this worker's copies: a token of its own, never the secret itself.
        self._copy_signed_by = signer(settings.secrets.signing_secret).token(b"copy")[:8]
        self._logged_failure: str | None = None  # the reload failure the log last reported
        self._keeping_reloads = 0  # reloads in a row whose sync left a top-up's total alone

    async def load(self) -> None:
        """The first load, at start: from Postgres, else from the copy in Redis. Never raises."""
        try:
            await self.reload()
        except OUTAGE as exc:
            await self._try_copy(exc)
        except Exception as exc:
            log.exception("inventory load failed")
            await self._try_copy(exc)

    async def poll(self) -> None:
        """One tick of the inventory loop: reload, saying in the log when reloads start and
        stop failing; a worker never loaded tries the copy in Redis. Never raises."""
        try:
            await self.reload()
            self.note_reload_failure(None)
        except OUTAGE as exc:
            self.note_reload_failure(type(exc).__name__)
            await self._try_copy(exc)  # never loaded: Redis may have a copy now
        except Exception:
            log.exception("inventory reload failed")

    async def reload(self) -> bool:
        """Build a new snapshot when the stored inventory version moved, or again after a sync
        that kept a newer top-up's total; True when it did."""
        pool = await self.postgres.connect()
        # One snapshot of Postgres: the version the totals are stamped with is the one the
        # document was read at.
        async with (
            pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            version = await current_version(conn)
            current = self.snapshot is not None and self.snapshot.version == version
            if current and not self._keeping_reloads:
                self.source = "postgres"  # a copy's version is Postgres' own again
                if await self._copy_wanted(version):  # lost, stale or of another layout
                    await self._keep_copy(
                        version, await export_document(conn), await load_api_keys(conn)
                    )
                return False
            doc = await export_document(conn)
            keys = await load_api_keys(conn)
        snapshot = await asyncio.to_thread(build_snapshot, doc, keys, version)
        kept = await self.hot.sync_inventory(
            {c.id: (c.shard, c.budget_micros) for c in snapshot.campaigns.values()},
            snapshot.billing_codes,
            version=version,
            force=self._keeping_reloads >= _MAX_KEEPING_RELOADS,
        )
        self._keeping_reloads = self._keeping_reloads + 1 if kept else 0
        if kept:
            log.info(
                "totals of newer top-ups kept; reloading again",
                extra={"kept": kept, "version": version},
            )
        self._install(snapshot, "postgres")
        if await self._copy_wanted(version):
            await self._keep_copy(version, doc, keys)
        return True

    def note_reload_failure(self, failure: str | None) -> None:
        """Keep the last reload failure for /readyz, and say in the log when it starts and
        ends (once each, not every poll): an operator sees why a worker is not ready."""
        if failure != self._logged_failure:
            self._logged_failure = failure
            if failure is not None:
                log.warning(
                    "inventory reload failing: Postgres or Redis unreachable",
                    extra={"error": failure, "ready": self.snapshot is not None},
                )
            else:
                log.info("inventory reload working again")
        self.postgres.last_error = failure

    def _install(self, snapshot: Snapshot, source: str) -> None:
        self.snapshot = snapshot
        self.source = source
        self.metrics.snapshot_builds.inc()
        # The snapshot lives until the next inventory change: exempt it (and the rest of the
        # heap as it stands) from the cyclic collector, so a full collection during traffic
        # walks only what requests allocate, not the inventory (~100 ms pauses otherwise).
        # Collect first, so no garbage cycle is frozen for good; a frozen old snapshot is
        # still freed by reference counting (it has no cycles).
        gc.collect()
        gc.freeze()
        log.info(
            "inventory loaded",
            extra={
                "version": snapshot.version,
                "source": source,
                "screens": len(snapshot.screens),
                "campaigns": len(snapshot.campaigns),
            },
        )

    # -- the inventory copy in Redis ---------------------------------------------------------

    async def _copy_wanted(self, version: int) -> bool:
        """Whether this worker should write the copy of `version`, which it holds and Postgres
        has: the copy in Redis is of another version or layout (or gone) and no other worker
        claimed the write. Checked at every poll (one HGET), so a copy that a late writer
        made older, that Redis lost, or that an older release wrote, is mended within a poll;
        the copy is the last one Postgres gave, never a newest-version-wins (after a restore
        of Postgres to an older version it follows Postgres)."""
        stamp = self._copy_stamp(version)
        try:
            if await self.copies.stored_copy_stamp() == stamp:
                return False
            return await self.copies.claim_copy_write(stamp)
        except REDIS_DOWN as exc:
            self._note_copy_problem(f"not checked: {type(exc).__name__}")
            return False

    async def _keep_copy(
        self, version: int, doc: InventoryDocument, keys: dict[bytes, ApiKeyInfo]
    ) -> None:
        """Write what this snapshot is built of to Redis, signed with the newest signing
        secret, for a worker that starts while Postgres is down (`load_copy`)."""
        secret = self.settings.secrets.signing_secret

        def encoded() -> tuple[bytes, str]:
            copy = encode_inventory_copy(version, doc, keys)
            return copy, signer(secret).token(copy)

        stamp = self._copy_stamp(version)
        try:
            copy, mac = await asyncio.to_thread(encoded)
            try:
                await self.copies.save_inventory_copy(stamp, mac, copy)
            finally:
                await self.copies.release_copy_claim(stamp)
        except REDIS_DOWN as exc:
            self._note_copy_problem(f"not written: {type(exc).__name__}")
            return
        self._note_copy_problem(None)
        log.info("inventory copy kept in Redis", extra={"version": version, "bytes": len(copy)})

    def _copy_stamp(self, version: int) -> str:
        return copy_stamp(version, self._copy_signed_by)

    def _note_copy_problem(self, problem: str | None) -> None:
        """Say in the log when keeping the copy starts and stops failing (not every poll)."""
        if problem != self._copy_problem:
            self._copy_problem = problem
            if problem is not None:
                log.warning("inventory copy in Redis %s", problem)

    async def load_copy(self) -> bool:
        """Serve the inventory copy Redis keeps (the version the last loading worker read)
        while Postgres cannot give the inventory: a worker (re)started during a Postgres
        outage serves, as the workers that were running keep serving their last snapshot. The
        next reload from Postgres replaces it. A copy of another layout, or signed by no
        configured secret (anything that can write to Redis could otherwise give a worker
        keys), is refused once and not read again until another copy is there. True when a
        copy was loaded."""
        found = await self.copies.load_inventory_copy()
        if found is None:
            return False
        stamp, mac, copy = found
        if stamp == self._refused_copy:
            return False
        layout, _, _ = stamp.partition(":")
        secrets = self.settings.secrets.signing_secrets

        def build() -> Snapshot | str:
            if layout != str(INVENTORY_COPY_FORMAT):
                return f"layout {layout}, this release reads {INVENTORY_COPY_FORMAT}"
            if not token_verifies(secrets, copy, mac):
                return "signed by no configured signing secret"
            try:
                kept = decode_inventory_copy(copy)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                return f"unreadable: {str(exc)[:200]}"
            return build_snapshot(kept.document, dict(kept.keys), kept.version)

        built = await asyncio.to_thread(build)
        if isinstance(built, str):
            self._refused_copy = stamp
            log.warning("inventory copy unusable", extra={"stamp": stamp, "reason": built})
            return False
        if self.snapshot is not None:  # Postgres answered meanwhile
            return False
        self._install(built, "redis copy")
        log.warning(
            "Postgres unreachable: serving the inventory copy kept in Redis",
            extra={"version": built.version},
        )
        return True

    async def _try_copy(self, failure: BaseException) -> None:
        """After a failed load from Postgres, the copy, if this worker has no snapshot yet and
        the failure is no misconfiguration: a wrong password or database name is a deploy to
        stop (unready), not an outage to ride out."""
        if self.snapshot is not None or isinstance(failure, _MISCONFIGURED):
            return
        try:
            await self.load_copy()
        except REDIS_DOWN as exc:
            self._note_copy_problem(f"not read: {type(exc).__name__}")
        except Exception:
            log.exception("inventory copy not loaded")
