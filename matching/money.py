"""Exact money: every amount is an integer number of micro-cents (1e-6 cent), never a float.

The wire carries decimal cents (`2.5` is two and a half cents); `Decimal` is used only at the
edges to convert. Postgres keeps NUMERIC(20, 6) cents, which is the same unit.
"""

from __future__ import annotations

import re
from decimal import (
    MAX_EMAX,
    MAX_PREC,
    MIN_EMIN,
    ROUND_CEILING,
    ROUND_HALF_EVEN,
    Context,
    Decimal,
    InvalidOperation,
)

MICROS_PER_CENT = 1_000_000
CENT_PLACES = Decimal("0.000001")
_MICROS = Decimal(MICROS_PER_CENT)
_MICRO_PLACES = 6
#: A context in which every product is exact (its precision is Decimal's largest).
_EXACT = Context(prec=MAX_PREC, Emin=MIN_EMIN, Emax=MAX_EMAX, traps=[InvalidOperation])
#: The largest exponent a Decimal can be built with (18 digits).
_FURTHEST_EXPONENT = 999_999_999_999_999_999
#: The most digits of micro-cents an amount may have (1e34 micro-cents; money stops at 1e21).
_MAX_DIGITS = 34


#: A decimal number in ASCII: optional sign, digits with an optional point, optional exponent.
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def is_decimal_text(value: str) -> bool:
    """Whether `value` is a number as JSON or a URL writes one. `Decimal()` (and msgspec's
    decoding of a string into a Decimal) also reads `3_0`, other scripts' digits (`३०`) and
    surrounding blanks, which no client means as a number."""
    return _DECIMAL_TEXT.fullmatch(value) is not None


class MoneyError(ValueError):
    """An amount that cannot be money: not a number, not finite, or finer than a micro-cent."""


def parse_cents(value: object) -> Decimal:
    """A wire value (JSON number, numeric string or Decimal) as a finite Decimal of cents."""
    if isinstance(value, bool):
        raise MoneyError("must be a number")
    if isinstance(value, Decimal):
        amount = value
    elif isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, str):
        if not is_decimal_text(value):
            raise MoneyError("must be a number")
        try:
            amount = Decimal(value)
        except InvalidOperation:  # an exponent beyond Decimal's range
            raise MoneyError("must be a number") from None
    elif isinstance(value, float):
        amount = Decimal(repr(value))
    else:
        raise MoneyError("must be a number")
    if not amount.is_finite():
        raise MoneyError("must be a finite number")
    return amount


def cents_to_micros(cents: Decimal, *, exact: bool = True) -> int:
    """Decimal cents to micro-cents. `exact` refuses finer amounts; otherwise rounds up.

    Done on the digits in integers, not in a Decimal context, which rounds a coefficient past
    28 digits (a floor of 3.333633000...0001 cents would come out as 3.333633, undercut) and
    flushes a tiny amount to zero (an accepted price of 1e-9999999 cents would be a free deal).
    Only the digits at or above the micro-cent are turned into an integer, so the work is
    bounded by the amount's size, not by how it is spelt (`0e999999999`, 5,000 trailing
    zeros); an amount past `_MAX_DIGITS` digits of micro-cents is refused (callers bound
    theirs far below)."""
    sign, digits, exponent = cents.as_tuple()
    if not isinstance(exponent, int):
        raise MoneyError("must be a finite number")
    if not any(digits):
        return 0
    shift = exponent + _MICRO_PLACES  # where the micro-cent falls among the digits
    whole = len(digits) + shift  # digits at or above the micro-cent
    if whole > _MAX_DIGITS:
        raise MoneyError("is too large")
    micros: int
    if shift >= 0:
        micros, rest = int("".join(map(str, digits))) * 10**shift, False
    elif whole <= 0:  # every digit is below a micro-cent
        micros, rest = 0, True
    else:
        micros = int("".join(map(str, digits[:whole])))
        rest = any(digits[whole:])
    if rest:
        if exact:
            raise MoneyError("has more than 6 decimal places of a cent")
        if not sign:
            micros += 1  # up: toward +infinity
    return -micros if sign else micros


def plain(value: Decimal) -> Decimal:
    """Drop trailing zeros but keep a plain exponent (normalize() would turn 100 into 1E+2)."""
    normalized = value.normalize()
    exponent = normalized.as_tuple().exponent
    if isinstance(exponent, int) and exponent > 0:
        return normalized.quantize(Decimal(1))
    return normalized


def micros_to_cents(micros: int) -> Decimal:
    """Micro-cents to Decimal cents without trailing zeros (2500000 -> Decimal('2.5'))."""
    return plain(Decimal(micros) / _MICROS)


def cents_text(micros: int) -> str:
    """`str(micros_to_cents(micros))` with integer arithmetic: 2500000 -> "2.5", 0 -> "0"."""
    return _plain_text(micros, MICROS_PER_CENT, 6)


def eur_text(micros: int) -> str:
    """Micro-cents as EUR in plain notation, without trailing zeros: 29867500 -> "0.298675",
    2 -> "0.00000002" (a Decimal's `str` would say "2E-8"; docs/contract.md#1-money: a plain
    number)."""
    return _plain_text(micros, MICROS_PER_CENT * 100, 8)


def _plain_text(micros: int, per_unit: int, digits: int) -> str:
    whole, fraction = divmod(abs(micros), per_unit)
    sign = "-" if micros < 0 else ""
    if not fraction:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{fraction:0{digits}d}".rstrip("0")


def play_price_micros(cpm_cents: Decimal, audience: Decimal) -> int:
    """Price of one play: cpm x audience / 1000, half-even to the micro-cent."""
    price = cpm_cents * audience * _MICROS / Decimal(1000)
    return int(price.to_integral_value(rounding=ROUND_HALF_EVEN))


#: Audiences as integers: 1/10,000ths of a viewer, the precision Postgres keeps (NUMERIC(14, 4)).
AUDIENCE_UNITS_PER_VIEWER = 10_000
# cpm x audience / 1000 in micro-cents is cpm micro-cents x audience units / (10^4 x 1000).
_UNITS_PER_PRICE_MICRO = AUDIENCE_UNITS_PER_VIEWER * 1000
# Below this product, play_price_micros's Decimal arithmetic (28 digits) is exact too.
_EXACT_DECIMAL_PRODUCT = 10**28


def scaled_exactly(value: Decimal, scale: int) -> int | None:
    """`value` x `scale` as an integer, or None when that is not a whole number."""
    if not value.is_finite():
        return None
    scaled = value * scale
    whole = scaled.to_integral_value()
    return int(whole) if whole == scaled else None


def play_price_from_units(cpm_micros: int, audience_units: int) -> int | None:
    """`play_price_micros` in integer arithmetic, for a CPM in micro-cents and an audience in
    units of `AUDIENCE_UNITS_PER_VIEWER`: the same half-even result without any Decimal.

    None for products so large that the Decimal version rounds on the way (more than 28
    digits); the caller then asks `play_price_micros`, whose answer stays the reference.
    """
    product = cpm_micros * audience_units
    if not -_EXACT_DECIMAL_PRODUCT < product < _EXACT_DECIMAL_PRODUCT:
        return None
    quotient, remainder = divmod(product, _UNITS_PER_PRICE_MICRO)
    twice = 2 * remainder
    if twice > _UNITS_PER_PRICE_MICRO or (twice == _UNITS_PER_PRICE_MICRO and quotient & 1):
        quotient += 1
    return quotient


def commission_micros(gross_micros: int, rate: Decimal) -> int:
    """Commission on a gross amount at `rate` (0..1), rounded half-even to the micro-cent."""
    return int((Decimal(gross_micros) * rate).to_integral_value(rounding=ROUND_HALF_EVEN))


def split_gross(gross_micros: int, rate: Decimal) -> tuple[int, int]:
    """(net, commission) with net + commission == gross exactly."""
    commission = commission_micros(gross_micros, rate)
    return gross_micros - commission, commission


def decimal_places(value: Decimal) -> int:
    """Decimal places of a finite value, trailing zeros not counted (1.500 has 1), read from
    its digits: normalize() would round to the context's 28 digits first."""
    _, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"not a finite number: {value}")
    trailing = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    return max(-(exponent + trailing), 0) if any(digits) else 0


#: A minimum bid above any price a campaign can pay (EUR 10 billion) is capped here, as the Core
#: API caps `min_bid_cents`: it is never met either way, and the arithmetic stays short (a
#: bidfloor of 1e999999 would otherwise take the worker tens of seconds to turn into an int).
MAX_MIN_BID_CENTS = 10**12


#: The division by an exchange rate: rounded up, so a floor is never undercut. A quotient that
#: is a whole number of cents is exact; any other rounds up to the same cent unless it lies
#: within 60 significant digits of the next one (a floor spelt with dozens of digits).
_CONVERT = Context(prec=60, rounding=ROUND_CEILING, traps=[InvalidOperation])


def openrtb_min_bid_micros(
    bidfloor_cpm_eur: Decimal, audience: Decimal, units_per_eur: Decimal | None = None
) -> int:
    """OpenRTB minimum bid: bidfloor (EUR CPM) x audience / 10 cents, rounded UP to a whole cent,
    at most MAX_MIN_BID_CENTS. Exact: a product in a context as wide as Decimal allows is
    never rounded (Decimal's default 28 digits would round a 29-digit floor down and flush a
    tiny one to 0, undercutting the floor); about 1.5 us, 0.4 ms for a floor of a million
    digits. A floor in another currency is divided by `units_per_eur` (units of it one euro
    buys) in the same step, so the one rounding is the final one, up to the cent."""
    if bidfloor_cpm_eur.is_zero() or audience.is_zero():
        return 0
    # adjusted(): the exponent of the leading digit. Above 10**15 the product, over 10, is past
    # the cap whatever its digits; below 10**-30 it is a positive amount under a cent: one cent.
    magnitude = bidfloor_cpm_eur.adjusted() + audience.adjusted()
    if units_per_eur is not None:
        magnitude -= units_per_eur.adjusted()
    if magnitude > 15:
        return MAX_MIN_BID_CENTS * MICROS_PER_CENT
    if magnitude < -30:
        return MICROS_PER_CENT
    product = _EXACT.multiply(bidfloor_cpm_eur, audience).scaleb(-1, _EXACT)
    if units_per_eur is not None:
        product = _CONVERT.divide(product, units_per_eur)
    cents = int(product.to_integral_value(rounding=ROUND_CEILING, context=_EXACT))
    return min(cents, MAX_MIN_BID_CENTS) * MICROS_PER_CENT


def json_decimal(text: str) -> Decimal:
    """A JSON number as a Decimal, exactly (the JSON decoders' `float_hook`). One whose
    exponent Decimal cannot hold (19 digits or more: `1e99999999999999999999`) makes Decimal
    raise InvalidOperation, a 500 wherever a body is decoded; it is read as 1 with the furthest
    exponent Decimal holds (18 digits), its sign and its side (huge or tiny) kept, so the rules
    treat it as too large or too fine. Such a zero is 0."""
    try:
        return Decimal(text)
    except InvalidOperation:
        mantissa, _, exponent = text.lower().partition("e")
        sign = "-" if mantissa.startswith("-") else ""
        if not any(c in "123456789" for c in mantissa):
            return Decimal(f"{sign}0")
        side = "-" if exponent.startswith("-") else ""
        return Decimal(f"{sign}1e{side}{_FURTHEST_EXPONENT}")
