"""Demo mode (contract: Demo mode): a fixed offer, deal and playout that store nothing.

A publisher wires up a player against these before any campaign runs. Every answer is built
here from constants; no demo path touches Redis or Postgres.
"""

from __future__ import annotations

from decimal import Decimal

from matching.inventory import DEMO_EXTERNAL_ID

DEMO_SCREEN_ID = DEMO_EXTERNAL_ID
DEMO_OFFER_ID = "test-offer-test"
DEMO_DEAL_ID = "test-deal-test"
DEMO_BILLING_ID = "test-billing-test"
DEMO_PLAYOUT_ID = "test-playout-test"
DEMO_BILLING_CODE = "DEMO-BILL-001"
DEMO_PRICE_MICROS = 2_500_000  # 2.50 cents
DEMO_TTL_SECONDS = 600  # the demo offer lives 10 minutes
DEMO_COMMISSION_RATE = Decimal("0.15")

# The demo creative: a full-HD still image every screen type can show.
DEMO_ASSET_URL = "https://assets.example.com/demo/test-offer-test-1920x1080.jpg"
DEMO_ASSET_MIME = "image/jpeg"
DEMO_ASSET_WIDTH = 1920
DEMO_ASSET_HEIGHT = 1080
DEMO_ASSET_SECONDS = 10
DEMO_AD_TITLE = "Demo offer"
DEMO_ADVERTISER = "Demo Advertiser"
DEMO_ADVERTISER_DOMAIN = "demo.example.com"
