"""The deprecation notice every OpenRTB response carries (contract: Versioning)."""

from __future__ import annotations

from typing import Any

from bidder.settings import Settings

OPENRTB_PREFIX = "/functions/v1/openrtb-2-6"
DEPRECATION_MESSAGE = (
    "The OpenRTB 2.6 interface is deprecated, kept for legacy compatibility only, and will be "
    "phased out. Migrate to the Core API (/functions/v1/api): explicit accept/reject, precise "
    "timing control, dynamic pricing and lower latency."
)


def deprecation_headers(settings: Settings) -> dict[str, str]:
    """`Deprecation: true` and a `Link` to the migration guide, on every OpenRTB response."""
    return {
        "Deprecation": "true",
        "Link": f'<{settings.server.migration_guide_url}>; rel="deprecation"',
    }


def deprecation_notice(settings: Settings) -> dict[str, Any]:
    """The notice fields, identical on every response (error bodies and `ext.platform`)."""
    return {
        "deprecated": True,
        "deprecation_message": DEPRECATION_MESSAGE,
        "documentation": settings.server.documentation_url,
        "migration_guide": settings.server.migration_guide_url,
    }


def openrtb_error_body(
    settings: Settings, code: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "error": code,
        "message": message,
        "details": details or {},
        **deprecation_notice(settings),
    }
