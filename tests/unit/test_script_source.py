"""Each Lua script runs with the helpers of store/lua/_common.lua it uses, and only those
(store/hot/scripts.py): a helper left out fails the script in Redis, one carried needlessly is
made again on every call."""

from __future__ import annotations

import importlib.resources
import re

import pytest

from store.hot import script_source

_LUA = importlib.resources.files("store") / "lua"
_SCRIPTS = sorted(
    entry.name
    for entry in _LUA.iterdir()
    if entry.name.endswith(".lua") and not entry.name.startswith("_")
)
_DEFINED = re.compile(r"^local (?:function )?([A-Za-z_]\w*)", re.MULTILINE)
_HELPERS = set(_DEFINED.findall((_LUA / "_common.lua").read_text()))


def _defined(source: str) -> list[str]:
    return [name for name in _DEFINED.findall(source) if name in _HELPERS]


def _called(source: str) -> set[str]:
    code = re.sub(r"--[^\n]*", "", source)
    return {name for name in re.findall(r"[A-Za-z_]\w*", code) if name in _HELPERS}


def test_the_helpers_are_read_from_common() -> None:
    assert {"num", "too_late", "read_offer", "settle", "release_play"} <= _HELPERS


@pytest.mark.parametrize("name", _SCRIPTS)
def test_a_script_has_every_helper_it_or_its_helpers_use_once(name: str) -> None:
    source = script_source(name)
    defined = _defined(source)
    assert len(defined) == len(set(defined)), defined
    assert _called(source) <= set(defined)
    assert source.endswith((_LUA / name).read_text())


def test_a_reservation_carries_no_helper_of_the_outcomes() -> None:
    assert _defined(script_source("reserve.lua")) == ["num", "too_late"]


def test_helpers_used_only_through_other_helpers_come_along_in_order() -> None:
    """respond.lua names settle and expire_now, not release_play, which settle calls."""
    respond = script_source("respond.lua")
    assert "release_play(" not in (_LUA / "respond.lua").read_text()
    defined = _defined(respond)
    assert defined.index("release_play") < defined.index("settle") < defined.index("expire_now")
    assert "now_ms" not in defined  # named only in comments and as a parameter elsewhere


def test_only_the_outcomes_that_set_a_lean_offers_expiry_carry_lean() -> None:
    """respond.lua and loss.lua ask whether an offer is lean; expire.lua and track.lua set the
    retention whatever the form, and read_offer's metatable field is not a use of `lean`."""
    carrying = {name for name in _SCRIPTS if "lean" in _defined(script_source(name))}
    assert carrying == {"respond.lua", "loss.lua"}
