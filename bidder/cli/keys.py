"""`bidder keys create --publisher ID [--expires-at ISO]` and `bidder keys revoke KEY_ID`: the
publishers' API keys, with the admin API's rules.

`register(subparsers)` adds the command; each action sets `func(args) -> int` (the exit code).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime
from typing import Any

from bidder.admin import KeyCreated, UnknownPublisher, check_expiry, issue_key, revoke_key_id
from bidder.cli.common import CommandFailed, command_settings, uuid_argument, with_connection
from bidder.errors import BadRequest
from bidder.runtime import utcnow
from store.postgres import Conn


def _cmd_keys_create(args: argparse.Namespace) -> int:
    settings = command_settings(redis=False)
    expires_at: datetime | None = args.expires_at
    try:  # the admin API's rules: in the future, and within the year 9999 once in UTC
        check_expiry(expires_at, utcnow())
    except BadRequest as exc:
        raise CommandFailed(f"--{exc.message.replace('_', '-')}") from None

    async def work(conn: Conn) -> KeyCreated:
        try:
            return await issue_key(conn, settings, args.publisher, expires_at)
        except UnknownPublisher:
            raise CommandFailed(f"no publisher with id {args.publisher}") from None

    created = asyncio.run(with_connection(settings, work))
    print(f"key_id:     {created.key_id}")
    print(f"api_key:    {created.api_key}")
    print(f"expires_at: {created.expires_at or 'never'}")
    print("The key is shown only this once; it is stored as a hash.", file=sys.stderr)
    return 0


def _cmd_keys_revoke(args: argparse.Namespace) -> int:
    settings = command_settings(redis=False)

    async def work(conn: Conn) -> bool:
        return await revoke_key_id(conn, args.key_id)

    if not asyncio.run(with_connection(settings, work)):
        raise CommandFailed(f"no API key with id {args.key_id}")
    print(f"revoked {args.key_id}; every worker refuses it within 2 seconds")
    return 0


def _timestamp(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {value!r} (e.g. 2027-01-01T00:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{value!r} needs a time zone (e.g. Z or +02:00)")
    return moment


def register(subparsers: Any) -> None:
    """Add `keys create|revoke` to the `bidder` command's subparsers."""
    keys = subparsers.add_parser("keys", help="publisher API keys")
    keys_cmds = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create_cmd = keys_cmds.add_parser("create", help="make a key; it is printed once")
    create_cmd.add_argument("--publisher", type=uuid_argument, required=True, metavar="ID")
    create_cmd.add_argument("--expires-at", type=_timestamp, default=None, metavar="ISO")
    create_cmd.set_defaults(func=_cmd_keys_create)
    revoke_cmd = keys_cmds.add_parser("revoke", help="revoke a key by its key_id")
    revoke_cmd.add_argument("key_id", type=uuid_argument, metavar="KEY_ID")
    revoke_cmd.set_defaults(func=_cmd_keys_revoke)
