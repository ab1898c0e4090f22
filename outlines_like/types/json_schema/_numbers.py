"""Integers and numbers: range regexes from bounds, and the number keywords."""

from __future__ import annotations

import decimal
import math
from typing import Any

from outlines_like.types.json_schema._base import ConverterBase
from outlines_like.types.json_schema._text import INTEGER, NUMBER, Rx, alt

MAX_LISTED_MULTIPLES = 256  # multiples of a bounded range written out one by one

_MAX_BOUND = 10**400  # _same_length_range recurses once per digit


def _same_length_range(lo: str, hi: str) -> str:
    """Regex for the digit strings of one length between ``lo`` and ``hi`` (inclusive)."""
    if not lo:
        return ""
    if lo == hi:
        return lo
    rest = len(lo) - 1
    if lo[0] == hi[0]:
        return lo[0] + _same_length_range(lo[1:], hi[1:])
    if lo[1:] == "0" * rest and hi[1:] == "9" * rest:
        return f"[{lo[0]}-{hi[0]}]" + ("[0-9]" * rest if rest < 3 else f"[0-9]{{{rest}}}")
    parts = [lo[0] + _same_length_range(lo[1:], "9" * rest)]
    low_mid, high_mid = int(lo[0]) + 1, int(hi[0]) - 1
    if low_mid <= high_mid:
        digit = str(low_mid) if low_mid == high_mid else f"[{low_mid}-{high_mid}]"
        parts.append(digit + ("[0-9]" * rest if rest < 3 else f"[0-9]{{{rest}}}"))
    parts.append(hi[0] + _same_length_range("0" * rest, hi[1:]))
    return "(?:" + "|".join(parts) + ")"


def natural_range(lo: int, hi: int | None) -> Rx:
    """Regex for the non-negative integers in ``[lo, hi]`` written without leading zeros."""
    if hi is not None and hi < lo:
        return None
    parts: list[str] = []
    top = hi if hi is not None else 10 ** len(str(lo)) - 1
    for length in range(len(str(lo)), len(str(top)) + 1):
        first = max(lo, 10 ** (length - 1) if length > 1 else 0)
        last = min(top, 10**length - 1)
        if first <= last:
            parts.append(_same_length_range(str(first), str(last)))
    if hi is None:
        parts.append(f"[1-9][0-9]{{{len(str(lo))},}}")
    return alt(parts)


def integer_range(lo: int | None, hi: int | None) -> Rx:
    """Regex for the integers in ``[lo, hi]`` (``None``: unbounded), as JSON writes them."""
    if lo is None and hi is None:
        return INTEGER
    if lo is not None and hi is not None and lo > hi:
        return None
    parts: list[Rx] = []
    if lo is None or lo < 0:  # negative part: -n with n in [max(1, -hi), -lo]
        n_lo = max(1, -hi) if hi is not None else 1
        n_hi = None if lo is None else -lo
        part = natural_range(n_lo, n_hi)
        parts.append(None if part is None else "-" + part)
    if hi is None or hi >= 0:
        parts.append(natural_range(max(0, lo if lo is not None else 0), hi))
    return alt(parts)


def _positive_decimal_range(lo: int, lo_excl: bool, hi: int | None, hi_excl: bool) -> Rx:
    """Regex for plain decimals (no exponent) ``x`` with ``lo <(=) x <(=) hi``, integer bounds."""
    fraction = r"(?:\.[0-9]+)?"
    if hi is not None and (hi < lo or (hi == lo and (lo_excl or hi_excl))):
        return None
    if hi is not None and hi == lo:
        return f"{lo}(?:\\.0+)?"
    parts: list[Rx] = []
    # integer part == lo
    parts.append(f"{lo}\\.0*[1-9][0-9]*" if lo_excl else f"{lo}{fraction}")
    # integer part strictly between the bounds: any fraction
    middle = natural_range(lo + 1, None if hi is None else hi - 1)
    if middle is not None:
        parts.append(f"{middle}{fraction}" if middle.startswith("(") else f"(?:{middle}){fraction}")
    if hi is not None and not hi_excl:
        parts.append(f"{hi}(?:\\.0+)?")
    return alt(parts)


def number_range(lo: int | None, lo_excl: bool, hi: int | None, hi_excl: bool) -> Rx:
    """Regex for JSON numbers in a range with integer bounds, in plain decimal notation."""
    parts: list[Rx] = []
    if lo is None or lo < 0:  # negative numbers -y, y > 0
        if hi is not None and hi < 0:
            y_lo, y_lo_excl = -hi, hi_excl
        else:
            y_lo, y_lo_excl = 0, True
        if lo is None:
            y_part = _positive_decimal_range(y_lo, y_lo_excl, None, False)
        else:
            y_part = _positive_decimal_range(y_lo, y_lo_excl, -lo, lo_excl)
        parts.append(None if y_part is None else "-" + y_part)
    if hi is None or (hi >= 0 and not (hi == 0 and hi_excl)):
        if lo is None or lo < 0:
            parts.append(_positive_decimal_range(0, False, hi, hi_excl))
        else:
            parts.append(_positive_decimal_range(lo, lo_excl, hi, hi_excl))
    return alt(parts)


class NumbersMixin(ConverterBase):
    """``integer`` and ``number`` schemas."""

    def bounds(self, s: dict[str, Any], path: str) -> tuple[Any, Any, Any, Any]:
        out = []
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            value = s.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _MAX_BOUND:
                raise self.invalid(
                    f"{path}/{key}",
                    f"{key} (a {len(str(abs(value)))}-digit integer) is too large for the "
                    "local masker (bounds up to 10**400; drop the bound)",
                )
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise self.invalid(f"{path}/{key}", f"{key} must be a finite number")
            if isinstance(value, float) and abs(value) >= 2**53 and value.is_integer():
                # the decimal the schema wrote (1e300 is 10**300), not the binary float's
                # digits: the range regex nests once per digit that differs from a round bound
                value = int(decimal.Decimal(repr(value)))
            out.append(value)
        return out[0], out[1], out[2], out[3]

    def convert_integer(self, s: dict[str, Any], path: str) -> Rx:
        minimum, ex_min, maximum, ex_max = self.bounds(s, path)
        lows = [math.ceil(minimum) if minimum is not None else None]
        lows.append(math.floor(ex_min) + 1 if ex_min is not None else None)
        highs = [math.floor(maximum) if maximum is not None else None]
        highs.append(math.ceil(ex_max) - 1 if ex_max is not None else None)
        lo = max((v for v in lows if v is not None), default=None)
        hi = min((v for v in highs if v is not None), default=None)
        self.check_order(s, path)
        step = self.multiple(s, path)
        if step is not None and step != 1:
            return self.integer_multiples(lo, hi, step, path)
        return integer_range(lo, hi)

    def multiple(self, s: dict[str, Any], path: str) -> decimal.Decimal | None:
        """``multipleOf`` as a decimal (as the schema wrote it), or ``None``."""
        value = s.get("multipleOf")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise self.invalid(path + "/multipleOf", "multipleOf must be a positive number")
        return decimal.Decimal(repr(value)) if isinstance(value, float) else decimal.Decimal(value)

    def integer_multiples(
        self, lo: int | None, hi: int | None, step: decimal.Decimal, path: str
    ) -> Rx:
        """The integers in ``[lo, hi]`` that are multiples of ``step``.

        Enforced when every integer is one (``0.5``), when the range holds at most
        :data:`MAX_LISTED_MULTIPLES` of them (listed), or, unbounded, when ``step`` divides
        ``10**k`` for ``k <= 3`` (the last ``k`` digits decide: 2, 4, 5, 8, 10, 25, 1000...).
        """
        if step != step.to_integral_value():
            if (1 / step) == (1 / step).to_integral_value():
                return integer_range(lo, hi)  # every integer is a multiple of 1/n
            self.unenforced("multipleOf", path, f"a fractional step {step} on integers")
            return integer_range(lo, hi)
        m = int(step)
        if lo is not None and hi is not None and (hi - lo) // m <= MAX_LISTED_MULTIPLES:
            first = -(-lo // m) * m
            return alt(str(v) for v in range(first, hi + 1, m))
        k = next((k for k in range(1, 4) if 10**k % m == 0), None)
        if lo is not None or hi is not None or k is None:
            self.unenforced(
                "multipleOf",
                path,
                f"multipleOf {m} with these bounds (enforced: a bounded range of at most "
                f"{MAX_LISTED_MULTIPLES} multiples, or no bounds and a step dividing 1000)",
            )
            return integer_range(lo, hi)
        small = [str(v) for v in range(m, 10**k, m)]
        suffixes = "|".join(str(v).zfill(k) for v in range(0, 10**k, m))
        body = "|".join([*small, f"[1-9][0-9]*(?:{suffixes})"])
        return f"(?:0|-?(?:{body}))"

    def check_order(self, s: dict[str, Any], path: str) -> None:
        minimum, ex_min, maximum, ex_max = self.bounds(s, path)
        low = max((v for v in (minimum, ex_min) if v is not None), default=None)
        high = min((v for v in (maximum, ex_max) if v is not None), default=None)
        if low is not None and high is not None and low > high:
            raise self.invalid(
                path, f"the lower bound {low} is greater than the upper bound {high}"
            )

    def convert_number(self, s: dict[str, Any], path: str) -> Rx:
        minimum, ex_min, maximum, ex_max = self.bounds(s, path)
        self.check_order(s, path)
        step = self.multiple(s, path)
        if step is not None:
            if step == step.to_integral_value():
                return self.convert_integer(s, path)  # multiples of an integer: integers
            exponent = int(step.normalize().as_tuple().exponent)
            bounded = any(v is not None for v in (minimum, ex_min, maximum, ex_max))
            if step.normalize() == decimal.Decimal(1).scaleb(exponent) and not bounded:
                places = -int(exponent)  # 0.01: at most two decimals
                return f"-?(?:0|[1-9][0-9]*)(?:\\.[0-9]{{1,{places}}})?"
            self.unenforced(
                "multipleOf",
                path,
                f"multipleOf {step} on numbers (enforced: integers, or 0.1, 0.01... unbounded)",
            )
        if all(v is None for v in (minimum, ex_min, maximum, ex_max)):
            return NUMBER
        for key, value in (
            ("minimum", minimum),
            ("exclusiveMinimum", ex_min),
            ("maximum", maximum),
            ("exclusiveMaximum", ex_max),
        ):
            if value is not None and not float(value).is_integer():
                self.unenforced(
                    key, path, f"a non-integer bound ({value}) on a number (integer bounds only)"
                )
                s = {k: v for k, v in s.items() if k != key}
        minimum, ex_min, maximum, ex_max = self.bounds(s, path)
        lo, lo_excl = None, False
        if minimum is not None:
            lo = int(minimum)
        if ex_min is not None and (lo is None or ex_min >= lo):
            lo, lo_excl = int(ex_min), True
        hi, hi_excl = None, False
        if maximum is not None:
            hi = int(maximum)
        if ex_max is not None and (hi is None or ex_max <= hi):
            hi, hi_excl = int(ex_max), True
        if lo is None and hi is None:
            return NUMBER
        return number_range(lo, lo_excl, hi, hi_excl)
