"""Exact money (docs/contract.md#1-money): micro-cent integers, half-even commission, net +
commission == gross always, and the parsing rules of wire amounts."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matching.money import (
    MAX_MIN_BID_CENTS,
    MICROS_PER_CENT,
    MoneyError,
    cents_to_micros,
    eur_text,
    json_decimal,
    micros_to_cents,
    openrtb_min_bid_micros,
    parse_cents,
    play_price_micros,
    split_gross,
)

# Any price a campaign can carry (up to 9e9 cents) and any commission rate 0..1 with up to
# 6 decimal places.
prices = st.integers(min_value=1, max_value=9_000_000_000 * 1_000_000)
rates = st.decimals(min_value=0, max_value=1, places=6, allow_nan=False, allow_infinity=False)


@given(gross=prices, rate=rates)
def test_net_plus_commission_is_gross(gross: int, rate: Decimal) -> None:
    net, commission = split_gross(gross, rate)
    assert net + commission == gross
    assert 0 <= commission <= gross
    # Commission is gross x rate rounded to the nearest micro-cent.
    assert abs(Decimal(commission) - Decimal(gross) * rate) <= Decimal("0.5")


@given(gross=prices, rate=rates)
def test_wire_figures_add_up_exactly(gross: int, rate: Decimal) -> None:
    net, commission = split_gross(gross, rate)
    assert micros_to_cents(net) + micros_to_cents(commission) == micros_to_cents(gross)


@given(
    cents=st.decimals(
        min_value=Decimal("0.000001"),
        max_value=Decimal(9_000_000_000),
        places=6,
        allow_nan=False,
        allow_infinity=False,
    )
)
def test_cents_round_trip_through_micros(cents: Decimal) -> None:
    assert micros_to_cents(cents_to_micros(cents)) == cents


@pytest.mark.parametrize(
    ("gross", "rate", "commission"),
    [
        (1, Decimal("0.5"), 0),  # 0.5 -> 0 (half to even)
        (3, Decimal("0.5"), 2),  # 1.5 -> 2
        (5, Decimal("0.5"), 2),  # 2.5 -> 2
        (2_500_000, Decimal("0.15"), 375_000),
        (2_125_000, Decimal("0.15"), 318_750),
        (10, Decimal("0.15"), 2),  # 1.5 -> 2
        (1_000_000, Decimal(0), 0),
        (1_000_000, Decimal(1), 1_000_000),
    ],
)
def test_commission_rounds_half_even(gross: int, rate: Decimal, commission: int) -> None:
    assert split_gross(gross, rate) == (gross - commission, commission)


@pytest.mark.parametrize(
    ("cpm", "audience", "micros"),
    [
        ("250", "10", 2_500_000),  # 250 x 10 / 1000 = 2.5 cents
        ("250", "1", 250_000),
        ("1", "0.001", 1),  # 0.000001 cents
        ("1", "0.0015", 2),  # 0.0000015 -> 2 micro-cents (half-even)
        ("1", "0.0025", 2),  # 0.0000025 -> 2 micro-cents (half-even)
        ("1000", "119.47", 119_470_000),
    ],
)
def test_play_price_is_cpm_times_audience_over_1000(cpm: str, audience: str, micros: int) -> None:
    assert play_price_micros(Decimal(cpm), Decimal(audience)) == micros


@pytest.mark.parametrize(
    ("value", "cents"),
    [
        (2.5, Decimal("2.5")),
        (3, Decimal(3)),
        ("0.25", Decimal("0.25")),
        (Decimal("1.5"), Decimal("1.5")),
    ],
)
def test_parse_cents_accepts_numbers(value: object, cents: Decimal) -> None:
    assert parse_cents(value) == cents


@pytest.mark.parametrize(
    "value",
    # Decimal() reads the last four as numbers; no wire value means them so.
    [True, None, "abc", "", "NaN", "Infinity", [1], {"a": 1}, "3_0", "\uff13", "\u0969", " 1"],
)
def test_parse_cents_refuses_what_is_not_a_finite_number(value: object) -> None:
    with pytest.raises(MoneyError):
        parse_cents(value)


def test_finer_than_a_micro_cent() -> None:
    with pytest.raises(MoneyError):
        cents_to_micros(Decimal("2.5000001"))
    assert cents_to_micros(Decimal("2.5000001"), exact=False) == 2_500_001  # rounds up
    assert cents_to_micros(Decimal("2.50000000")) == 2_500_000


# Decimals as a wire can spell them: any coefficient (past the 28 digits of Decimal's default
# context too); exponents far below a micro-cent (the oracle, Fraction, gets slow past a few
# thousand; the flush to zero below Decimal's Emin is the parametrized case after).
wire_decimals = st.builds(
    lambda sign, coefficient, exponent: Decimal(f"{sign}{coefficient}E{exponent}"),
    st.sampled_from(["", "-"]),
    st.integers(min_value=0, max_value=10**60),
    st.integers(min_value=-3_000, max_value=30),
)


@given(cents=wire_decimals)
def test_micros_are_the_exact_amount_or_its_ceiling(cents: Decimal) -> None:
    """Against the rational value (Fraction is exact): the context arithmetic this replaced
    rounded long coefficients down and flushed tiny amounts to zero."""
    exact = Fraction(cents) * MICROS_PER_CENT
    if abs(exact) >= 10**34:  # beyond any money (34 digits of micro-cents): refused
        with pytest.raises(MoneyError):
            cents_to_micros(cents, exact=False)
        return
    up = math.ceil(exact)
    assert cents_to_micros(cents, exact=False) == up
    if exact == up:
        assert cents_to_micros(cents) == up
    else:
        with pytest.raises(MoneyError):
            cents_to_micros(cents)


@pytest.mark.parametrize(
    ("cents", "up"),
    [
        # A positive price that is not a whole micro-cent is never 0 micro-cents.
        ("1e-9999999", 1),
        ("3.333633000000000000000000000000000001", 3_333_634),
        ("-0.0000015", -1),
    ],
)
def test_what_a_decimal_context_got_wrong(cents: str, up: int) -> None:
    assert cents_to_micros(Decimal(cents), exact=False) == up
    with pytest.raises(MoneyError):
        cents_to_micros(Decimal(cents))


@pytest.mark.parametrize(
    ("cents", "micros"),
    [
        # Cheap however they are spelt: a zero with a huge exponent built a 400 MB integer
        # (0 * 10**1000000005), a 5,000-digit coefficient hit int()'s 4,300-digit limit (a 500).
        ("0e999999999", 0),
        ("-0e999999999", 0),
        ("0e-999999999", 0),
        ("1." + "0" * 5000, 1_000_000),
        ("25" + "0" * 5000 + "e-5001", 2_500_000),
    ],
)
def test_an_amount_costs_its_size_not_its_spelling(cents: str, micros: int) -> None:
    assert cents_to_micros(Decimal(cents)) == micros


@pytest.mark.parametrize("cents", ["1e40", "-1e40", "9" * 40])
def test_an_amount_beyond_any_money_is_refused(cents: str) -> None:
    with pytest.raises(MoneyError):
        cents_to_micros(Decimal(cents), exact=False)


@pytest.mark.parametrize(
    ("bidfloor", "audience", "cents"),
    [
        ("2.50", "119.47", 30),  # docs/contract.md#1-money: 29.8675 rounds up to 30
        ("2.5", "100", 25),
        # Past Decimal's 28 digits its context would round the product down to 25: undercut.
        ("2.5000000000000000000000000001", "100", 26),
        ("2.5" + "0" * 40 + "1", "100", 26),
        # Flushed to 0 by Decimal's context: any positive floor is at least a cent.
        ("1e-1000030", "1", 1),
        ("1e-30", "1", 1),
        # A floor of 100,000 digits: exact, and in microseconds-to-milliseconds (the fraction
        # arithmetic tried first took 0.3 s here, 30 s for the million digits a bid may carry).
        ("2.5" + "0" * 100_000 + "1", "100", 26),
        ("0", "119.47", 0),
        ("-0", "5", 0),
    ],
)
def test_the_openrtb_minimum_bid_is_never_below_the_floor(
    bidfloor: str, audience: str, cents: int
) -> None:
    assert openrtb_min_bid_micros(Decimal(bidfloor), Decimal(audience)) == cents * MICROS_PER_CENT


@given(
    floor=st.decimals(min_value=0, max_value=10**6, places=30, allow_nan=False),
    audience=st.decimals(min_value="0.0001", max_value=10**9, places=18, allow_nan=False),
)
def test_the_openrtb_minimum_bid_is_the_ceiling_of_the_exact_product(
    floor: Decimal, audience: Decimal
) -> None:
    # Past MAX_MIN_BID_CENTS (1e12 cents, above any price a campaign can pay) it is that cap.
    exact = Fraction(floor) * Fraction(audience) / 10
    expected = min(math.ceil(exact), MAX_MIN_BID_CENTS)
    assert openrtb_min_bid_micros(floor, audience) == expected * MICROS_PER_CENT


def test_the_openrtb_minimum_bid_at_the_cap_is_the_cap() -> None:
    # hypothesis found it: 999999.998... EUR CPM x 10000000.0198... / 10 = 1e12 cents and a bit
    floor, audience = (
        Decimal("999999.998020000000019799900028520244"),
        Decimal("10000000.019800000039006002"),
    )
    assert math.ceil(Fraction(floor) * Fraction(audience) / 10) == MAX_MIN_BID_CENTS + 1
    assert openrtb_min_bid_micros(floor, audience) == MAX_MIN_BID_CENTS * MICROS_PER_CENT
    just_under = Decimal(MAX_MIN_BID_CENTS - 1) * 10  # x 1 / 10: one cent under the cap
    assert (
        openrtb_min_bid_micros(just_under, Decimal(1)) == (MAX_MIN_BID_CENTS - 1) * MICROS_PER_CENT
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2.5", Decimal("2.5")),
        ("1e400", Decimal("1e400")),
        # Decimal cannot hold a 19-digit exponent (InvalidOperation: a 500 wherever decoded):
        # the furthest it can, same sign and side.
        ("1e99999999999999999999", Decimal("1e999999999999999999")),
        ("-2.5e99999999999999999999", Decimal("-1e999999999999999999")),
        ("3e-99999999999999999999", Decimal("1e-999999999999999999")),
        ("0.0e99999999999999999999", Decimal(0)),
    ],
)
def test_json_numbers_decode_to_a_decimal_whatever_their_exponent(
    text: str, value: Decimal
) -> None:
    assert json_decimal(text) == value


_PLAIN_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?")


@given(micros=st.integers(min_value=-(10**18), max_value=10**18))
def test_eur_text_is_the_exact_amount_in_plain_notation(micros: int) -> None:
    """docs/contract.md#1-money: JSON output is a plain number; a price is EUR = micro-cents /
    10^8."""
    text = eur_text(micros)
    assert _PLAIN_NUMBER.fullmatch(text), text
    assert Fraction(text) == Fraction(micros, 100 * MICROS_PER_CENT)


def test_eur_text_of_prices_below_a_millionth_of_a_euro() -> None:
    assert [eur_text(m) for m in (2, 99, 100, 29_867_500, 10**8, 0)] == [
        "0.00000002",
        "0.00000099",
        "0.000001",
        "0.298675",
        "1",
        "0",
    ]
