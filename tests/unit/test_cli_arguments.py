"""The command line's id arguments: UUIDs in any form, and an API key never repeated."""

from __future__ import annotations

import argparse

import pytest

from bidder.auth import new_api_key
from bidder.cli.common import uuid_argument


def test_a_uuid_argument_takes_any_form_and_gives_the_canonical_one() -> None:
    canonical = "0b5a2f4e-8c1d-4e2f-9a3b-1c2d3e4f5a6b"
    assert uuid_argument(canonical.upper()) == canonical
    assert uuid_argument("{" + canonical.replace("-", "") + "}") == canonical


@pytest.mark.parametrize("prefix", ["dk_stg_", "dk_live_"])
def test_an_api_key_given_as_an_id_is_not_repeated(prefix: str) -> None:
    """`bidder keys revoke <the key>` printed the key on stderr, the command's log stream."""
    key, _ = new_api_key(prefix)
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        uuid_argument(key)
    assert key[len(prefix) :] not in str(caught.value)
    assert "API key" in str(caught.value)


def test_anything_else_that_is_no_uuid_is_quoted() -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        uuid_argument("campaign-7")
    assert "'campaign-7'" in str(caught.value)
