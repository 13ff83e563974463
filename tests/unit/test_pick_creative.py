"""The creative choice from the snapshot's pre-ranked lists equals the rule it implements.

Contract (screen types and assets) and decisions 3: only kinds the screen type takes; Core picks
the screen's exact size first, then the richer kind (video, cinemagraph, image), then the lowest
id; OpenRTB needs the slot's exact size and an accepted MIME type, and says which step failed.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from matching.engine import VideoSlot, pick_creative
from matching.inventory import COMPATIBLE_KINDS
from matching.snapshot import CreativeInfo, build_snapshot
from tests.factories import CAMPAIGN, basic_document, creative, screen, uid

_RICHNESS = {"video": 0, "cinemagraph": 1, "image": 2}
_URL = {"video": "https://cdn.example/a.mp4", "cinemagraph": "https://cdn.example/a.gif"}
_MIME = {"video": "video/mp4", "cinemagraph": "image/gif", "image": "image/jpeg"}
sizes = st.sampled_from([(1920, 1080), (1080, 1920), (1280, 720)])


def _rule(
    creatives: list[CreativeInfo], screen_type: str, size: tuple[int, int], slot: VideoSlot | None
) -> CreativeInfo | str:
    """The rule written out plainly, independent of the engine's ranking."""
    compatible = [c for c in creatives if c.kind in COMPATIBLE_KINDS[screen_type]]
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
        st.tuples(st.sampled_from(["video", "cinemagraph", "image"]), sizes), max_size=6
    ),
    screen_type=st.sampled_from(["static", "slow", "moving"]),
    screen_size=sizes,
    slot_size=st.one_of(st.none(), sizes),
    mimes=st.one_of(st.none(), st.frozensets(st.sampled_from(sorted(_MIME.values())))),
)
def test_pick_creative_follows_the_rule(
    specs: list[tuple[str, tuple[int, int]]],
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
            url=_URL.get(kind, "https://cdn.example/a.jpg"),
            width=width,
            height=height,
        )
        for n, (kind, (width, height)) in enumerate(specs)
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
