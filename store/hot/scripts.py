"""The Lua scripts' sources: a script of store/lua/ with the helpers of `_common.lua` it uses.

Redis runs a script's whole text on every call, so every `local function` a script carries is
made again (a closure, later garbage) each time it runs, used or not: carrying all of
`_common.lua` cost the reservation about 2 us of Redis CPU a call. A script therefore gets only
the helpers it names, and those they name in turn, in `_common.lua`'s order (a helper is
defined before its users there).
"""

from __future__ import annotations

import functools
import importlib.resources
import re

#: A top-level definition of `_common.lua`: `local function name(` or `local NAME =`.
_DEFINITION = re.compile(r"^local (?:function )?([A-Za-z_]\w*)", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z_]\w*")
_COMMENT = re.compile(r"--[^\n]*")


def _words(text: str) -> set[str]:
    """The names `text` uses (its comments' words are not uses)."""
    return set(_WORD.findall(_COMMENT.sub("", text)))


def _read(name: str) -> str:
    return (importlib.resources.files("store") / "lua" / name).read_text()


def _helpers() -> list[tuple[str, str]]:
    """`_common.lua` cut at its top-level definitions: (name, text up to the next one), in
    the file's order. The comment lines above a definition end the text before it: comments
    cost nothing when Redis runs the script."""
    common = _read("_common.lua")
    found = list(_DEFINITION.finditer(common))
    ends = [match.start() for match in found[1:]] + [len(common)]
    pairs = zip(found, ends, strict=True)
    return [(match.group(1), common[match.start() : end]) for match, end in pairs]


@functools.cache
def script_source(name: str) -> str:
    """The text Redis runs for store/lua/`name`: the helpers it uses, then the script."""
    script = _read(name)
    helpers = _helpers()
    known = {helper for helper, _ in helpers}
    needed = _words(script) & known
    # A helper uses only those defined above it, so one pass from the last up gathers them all.
    for helper, text in reversed(helpers):
        if helper in needed:
            needed |= _words(text) & known
    return "".join(text for helper, text in helpers if helper in needed) + "\n" + script
