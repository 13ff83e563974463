"""Where the standards bodies' reference material is: tests/standards/ in this repository
(its README says where each file comes from)."""

from __future__ import annotations

from pathlib import Path

STANDARDS = Path(__file__).resolve().parents[1] / "standards"
VAST_4_0_XSD = STANDARDS / "vast" / "vast_4.0.xsd"
OPENRTB_SCHEMAS = STANDARDS / "openrtb" / "jsonschema-2.6"
