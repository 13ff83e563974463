"""The creative choice from the snapshot's pre-ranked lists equals the rule it implements.

docs/contract.md#2-inventory (screen types and assets) and docs/contract.md#3-matching-and-price:
only kinds the screen type takes, and on a static screen only "Static images (JPEG, PNG)", so no GIF
even of kind `image`; Core picks the screen's exact size first, then the richer kind (video,
cinemagraph, image), then the lowest id; OpenRTB needs the slot's exact size and an accepted MIME
type, and says which step failed.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from matching.engine import VideoSlot, pick_creative
from matching.snapshot import CreativeInfo, build_snapshot
from tests.support.factories import CAMPAIGN, basic_document, creative, screen, uid

_RICHNESS = {"video": 0, "cinemagraph": 1, "image": 2}
#: The contract's table of screen types and assets, written out here rather than imported.
_TAKES = {
    "static": {("image", "image/jpeg"), ("image", "image/png")},
    "slow": {("image", "image/jpeg"), ("image", "image/png"), ("image", "image/gif")}
    | {("cinemagraph", "image/gif"), ("cinemagraph", "video/mp4")},
}
_TAKES["moving"] = _TAKES["slow"] | {("video", "video/mp4")}
#: Files of each kind: (URL, its MIME type).
_FILES = {
    "video": [("https://cdn.example/a.mp4", "video/mp4")],
    "cinemagraph": [
        ("https://cdn.example/a.gif", "image/gif"),
        ("https://cdn.example/c.mp4", "video/mp4"),
    ],
    "image": [
        ("https://cdn.example/a.jpg", "image/jpeg"),
        ("https://cdn.example/a.png", "image/png"),
        ("https://cdn.example/b.gif", "image/gif"),
    ],
}
_MIMES = sorted({mime for files in _FILES.values() for _, mime in files})
sizes = st.sampled_from([(1920, 1080), (1080, 1920), (1280, 720)])


def _rule(
    creatives: list[CreativeInfo], screen_type: str, size: tuple[int, int], slot: VideoSlot | None
) -> CreativeInfo | str:
    """The rule written out plainly, independent of the engine's ranking."""
    compatible = [c for c in creatives if (c.kind, c.mime_type) in _TAKES[screen_type]]
    if not compatible:
        return "no_compatible_asset"
    if slot is None:
        return min(compatible, key=lambda c: ((c.width, c.height) != size, _RICHNESS[c.kind], c.id))
    sized = [c for c in compatible if (c.width, c.height) == (slot.width, slot.height)]
    if not sized:
        return "resolution_mismatch"
    allowed = [c for c in sized if slot.mimes is None or c.mime_type in slot.mimes]
    if not allowed:
        return "mime_not_allowed"
    return min(allowed, key=lambda c: (_RICHNESS[c.kind], c.id))


@given(
    specs=st.lists(
        st.tuples(st.sampled_from(["video", "cinemagraph", "image"]), st.integers(0, 2), sizes),
        max_size=6,
    ),
    screen_type=st.sampled_from(["static", "slow", "moving"]),
    screen_size=sizes,
    slot_size=st.one_of(st.none(), sizes),
    mimes=st.one_of(st.none(), st.frozensets(st.sampled_from(_MIMES))),
)
def test_pick_creative_follows_the_rule(
    specs: list[tuple[str, int, tuple[int, int]]],
    screen_type: str,
    screen_size: tuple[int, int],
    slot_size: tuple[int, int] | None,
    mimes: frozenset[str] | None,
) -> None:
    creatives: list[Any] = [
        creative(
            id=uid(10, n),
            campaign_id=CAMPAIGN,
            kind=kind,
            url=_FILES[kind][file % len(_FILES[kind])][0],
            width=width,
            height=height,
        )
        for n, (kind, file, (width, height)) in enumerate(specs)
    ]
    width, height = screen_size
    doc = basic_document(
        creatives=creatives, screens=[screen(type=screen_type, width=width, height=height)]
    )
    snapshot = build_snapshot(doc)
    info = snapshot.campaigns[CAMPAIGN]
    target = next(iter(snapshot.screens.values()))
    slot = None if slot_size is None else VideoSlot(slot_size[0], slot_size[1], mimes)
    expected = _rule(list(info.creatives), screen_type, screen_size, slot)
    assert pick_creative(info, target, slot) == expected
