"""GET /docs/{name}: the integration guides the deprecation notice links to (`Link` header,
`documentation` and `migration_guide` fields), served as Markdown from the checkout's docs/.

Only the guides below are served. The defaults of DOCUMENTATION_URL and MIGRATION_GUIDE_URL
point here; a deployment that publishes its guides elsewhere sets those instead.
"""

from __future__ import annotations

from pathlib import Path

from litestar import Response, get
from litestar.params import FromPath

from bidder.errors import NotFound, echoed

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: Path name -> guide file.
GUIDES = {
    "api-openrtb": "api-openrtb.md",
    "migration-openrtb-to-core": "migration-openrtb-to-core.md",
    "api-core": "api-core.md",
    "reports": "reports.md",
    # The inventory document's fields, which the OpenRTB guide cites for targeting.
    "inventory": "inventory.md",
    # The product decisions the guides cite by section (`contract.md#6-openrtb-path`).
    "contract": "contract.md",
}


@get("/docs/{name:str}", sync_to_thread=False)
def guide(name: FromPath[str]) -> Response[bytes]:
    # The guides link each other by file name (`api-core.md`), so that the links work in the
    # checkout too; served here, such a link names the guide with its suffix.
    file = GUIDES.get(name.removesuffix(".md"))
    if file is None or not (DOCS / file).is_file():
        raise NotFound(f"No guide named {echoed(name)}")
    # Litestar adds `; charset=utf-8` to a text type (given here too, it came out twice).
    return Response((DOCS / file).read_bytes(), media_type="text/markdown")


routes = [guide]
