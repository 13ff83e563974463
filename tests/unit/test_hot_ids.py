"""Offer and deal ids: random version-4 UUIDs in canonical lowercase text whose first hex digit
is the campaign's shard (architecture: the id alone finds its keys), and `shard_of` accepts
exactly the canonical UUID texts, in either case, as `uuid.UUID` reads them."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from matching.snapshot import SHARDS
from store.hot import day_of, new_id, random_uuid, shard_of


def _reference_shard_of(an_id: str) -> int | None:
    """The definition: a UUID that prints back as the same text (case aside)."""
    try:
        parsed = uuid.UUID(an_id)
    except ValueError:
        return None
    if str(parsed) != an_id.lower():
        return None
    return int(an_id[0], 16)


def test_new_ids_are_version_4_uuids_of_their_shard() -> None:
    for shard in range(SHARDS):
        for _ in range(200):
            an_id = new_id(shard)
            parsed = uuid.UUID(an_id)
            assert str(parsed) == an_id  # canonical and lowercase
            assert parsed.version == 4
            assert parsed.variant == uuid.RFC_4122
            assert shard_of(an_id) == shard


def test_random_uuids_are_canonical_version_4() -> None:
    for _ in range(2_000):
        text = random_uuid()
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    assert {random_uuid()[0] for _ in range(2_000)} == set("0123456789abcdef")


def test_new_ids_differ() -> None:
    assert len({new_id(3) for _ in range(10_000)}) == 10_000


def test_new_ids_use_every_variant_digit() -> None:
    assert {new_id(0)[19] for _ in range(2_000)} == set("89ab")


uuid_like = st.uuids().map(str)
mangled = st.tuples(
    uuid_like, st.sampled_from(["upper", "braces", "urn", "hex", "cut", "pad"])
).map(
    lambda pair: {
        "upper": pair[0].upper(),
        "braces": "{" + pair[0] + "}",
        "urn": "urn:uuid:" + pair[0],
        "hex": pair[0].replace("-", ""),
        "cut": pair[0][:-1],
        "pad": pair[0] + "\n",
    }[pair[1]]
)


@given(an_id=st.one_of(uuid_like, mangled, st.text(max_size=40)))
def test_shard_of_agrees_with_uuid_parsing(an_id: str) -> None:
    assert shard_of(an_id) == _reference_shard_of(an_id)


offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@given(moment=st.datetimes(min_value=datetime(2000, 1, 1), timezones=offsets))
def test_day_of_is_the_utc_date(moment: datetime) -> None:
    assert day_of(moment) == moment.astimezone(UTC).strftime("%Y%m%d")


def test_ids_differ_between_a_process_and_its_forked_child() -> None:
    """Random digits are fetched in batches; a forked worker must not reuse its parent's."""
    random_uuid()  # the parent now holds a batch of digits
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then exit without running pytest's teardown
        try:
            os.write(write_end, " ".join(random_uuid() for _ in range(50)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child = set(pipe.read().decode().split())
    os.waitpid(pid, 0)
    parent = {random_uuid() for _ in range(50)}
    assert len(child) == 50
    assert not child & parent


def test_ids_stay_unique_across_batches() -> None:
    ids = [random_uuid() for _ in range(1000)]  # several 4 KiB batches of digits
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 4 and str(uuid.UUID(i)) == i for i in ids)
