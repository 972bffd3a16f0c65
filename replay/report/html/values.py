"""Tolerant getters and formatters: any JSON value of a report, read or shown without a crash.

Reports come from other tools, older versions and hand edits, so a field of the wrong type is
shown as it is or skipped, never an exception. Every piece of report text leaves through `esc`
(report fields come from servers and may hold markup).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Any

from replay.utils.json_arrays import is_array


def esc(value: Any) -> str:
    """Every piece of report text goes through here (report fields come from servers)."""
    return html.escape(str(value), quote=True)


def as_float(value: Any) -> float | None:
    """A report number as a float: JSON numbers, and the strings "nan"/"inf"/"-inf" that the
    report writes for non-finite values. None when absent or not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, str)):
        try:
            return float(value)
        except (ValueError, OverflowError):
            return None
    return None


def fmt(value: Any) -> str:
    """A value as the report wrote it (floats keep their round-trip repr), escaped."""
    if value is None:
        return "\u2014"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return esc(repr(value))
    if isinstance(value, (dict, list)):
        return esc(json.dumps(value, sort_keys=True))
    return esc(value)


def fmt_approx(value: Any) -> str:
    """A statistic (a KL, say) to three significant digits, escaped; the JSON report keeps the
    exact value. Anything that is not a finite float is shown as `fmt` shows it."""
    if isinstance(value, float) and math.isfinite(value):
        return esc(f"{value:.3g}")
    return fmt(value)


def slug(text: str) -> str:
    """A fragment-safe anchor id, one-to-one (two request ids never share an anchor):
    "g0/b1/t2" -> "g0-b1-t2"; any other character becomes _hex_."""
    return "".join(c if c.isascii() and c.isalnum() else "-" if c == "/" else f"_{ord(c):x}_"
                   for c in text) or "_"


def int_or(value: Any, default: int) -> int:
    """An int field of a hand-edited or foreign report, tolerated when it is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def dict_field(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """A field that should be an object; {} when absent, null or anything else."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def list_field(obj: dict[str, Any], key: str) -> Sequence[Any]:
    """A field that should be an array; [] when absent, null or anything else."""
    value = obj.get(key)
    return value if is_array(value) else []
