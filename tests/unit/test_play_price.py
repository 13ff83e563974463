"""The integer price of a play (matching's hot path) equals the Decimal reference exactly.

docs/contract.md#1-money and docs/contract.md#3-matching-and-price: price = cpm x audience / 1000,
half-even to the micro-cent. The engine computes it from the snapshot's integer CPM (micro-cents)
and integer audience (1/10,000ths); `matching.money.play_price_micros` stays the definition it must
agree with.
"""

from __future__ import annotations

from decimal import Decimal

from hypothesis import example, given
from hypothesis import strategies as st

from matching.engine import play_price
from matching.money import (
    AUDIENCE_UNITS_PER_VIEWER,
    MICROS_PER_CENT,
    play_price_from_units,
    play_price_micros,
    scaled_exactly,
)
from matching.snapshot import build_snapshot
from tests.support.factories import CAMPAIGN, basic_document, campaign

# Any CPM a campaign can carry (up to 9e9 cents, 6 decimal places) and any audience Postgres
# can hold (NUMERIC(14, 4)), plus small values where half-way cases are frequent.
cpms = st.one_of(
    st.decimals(min_value=Decimal("0.000001"), max_value=Decimal(9_000_000_000), places=6),
    st.decimals(min_value=Decimal("0.000001"), max_value=Decimal(100), places=6),
)
audiences = st.one_of(
    st.decimals(min_value=Decimal("0.0001"), max_value=Decimal("9999999999.9999"), places=4),
    st.decimals(min_value=Decimal("0.0001"), max_value=Decimal(10), places=4),
)


@given(cpm=cpms, audience=audiences)
@example(cpm=Decimal("0.000005"), audience=Decimal("1"))  # 0.005 micro-cents: rounds to 0
@example(cpm=Decimal("0.000015"), audience=Decimal("100"))  # exactly 1.5: half-even up to 2
@example(cpm=Decimal("0.000025"), audience=Decimal("100"))  # exactly 2.5: half-even down to 2
@example(cpm=Decimal(9_000_000_000), audience=Decimal("9999999999.9999"))  # beyond 28 digits
def test_integer_price_equals_decimal_price(cpm: Decimal, audience: Decimal) -> None:
    cpm_micros = scaled_exactly(cpm, MICROS_PER_CENT)
    audience_units = scaled_exactly(audience, AUDIENCE_UNITS_PER_VIEWER)
    assert cpm_micros is not None
    assert audience_units is not None
    reference = play_price_micros(cpm, audience)
    fast = play_price_from_units(cpm_micros, audience_units)
    # None only where Decimal's 28 digits are not enough; the engine then uses the reference.
    assert fast == reference or (fast is None and cpm_micros * audience_units >= 10**28)


def test_half_way_prices_round_to_even() -> None:
    # 0.000015 cents CPM x 100 viewers / 1000 = 0.0000015 cents = 1.5 micro-cents.
    assert play_price_from_units(15, 100 * AUDIENCE_UNITS_PER_VIEWER) == 2
    assert play_price_from_units(25, 100 * AUDIENCE_UNITS_PER_VIEWER) == 2
    assert play_price_from_units(35, 100 * AUDIENCE_UNITS_PER_VIEWER) == 4


@given(
    cpm=cpms,
    audience=st.one_of(
        audiences,
        # OpenRTB audiences come from the request and may be finer than 4 decimal places.
        st.decimals(min_value=Decimal("0.00000001"), max_value=Decimal(1000), places=8),
    ),
)
def test_engine_price_equals_decimal_price(cpm: Decimal, audience: Decimal) -> None:
    snapshot = build_snapshot(basic_document(campaigns=[campaign(cpm_cents=cpm)]))
    info = snapshot.campaigns[CAMPAIGN]
    units = scaled_exactly(audience, AUDIENCE_UNITS_PER_VIEWER)
    assert play_price(info, audience, units) == play_price_micros(cpm, audience)


def test_scaled_exactly_refuses_finer_values() -> None:
    assert scaled_exactly(Decimal("2.5"), MICROS_PER_CENT) == 2_500_000
    assert scaled_exactly(Decimal("12.3456"), AUDIENCE_UNITS_PER_VIEWER) == 123_456
    assert scaled_exactly(Decimal("12.34567"), AUDIENCE_UNITS_PER_VIEWER) is None
    assert scaled_exactly(Decimal("NaN"), AUDIENCE_UNITS_PER_VIEWER) is None
