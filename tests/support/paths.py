"""Where the standards bodies' reference material is: `shared/` beside the checkout."""

from __future__ import annotations

from pathlib import Path

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
REFERENCE = SHARED / "reference"
VAST_4_0_XSD = REFERENCE / "vast" / "vast_4.0.xsd"
OPENRTB_SCHEMAS = REFERENCE / "openrtb" / "jsonschema-2.6"
OPENRTB_EXAMPLES = REFERENCE / "openrtb" / "examples"
