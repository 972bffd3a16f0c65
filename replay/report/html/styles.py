"""Colours and symbols of request statuses, verdicts and cache tiers: one table for the page.

Every status has a one-character symbol besides its colour, so that grid cells read without
colour; `rank` orders statuses from good to bad (the worst over repeats colours a request).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


IDENTICAL = "identical"
LOGPROB_DRIFT = "logprob_drift"
TOKEN_DIVERGENCE = "token_divergence"
PROMPT_LOGPROB_DRIFT = "prompt_logprob_drift"
CACHE_MISS = "cache_miss"
ERROR = "error"


@dataclass(frozen=True)
class StatusStyle:
    fill: str
    stroke: str
    symbol: str  # one character for grid cells, readable without colour
    rank: int  # how bad: the worst status of a request over repeats decides its colour


STATUS_STYLES = MappingProxyType({
    IDENTICAL: StatusStyle("#c8e6c9", "#2e7d32", "\u2713", 0),
    CACHE_MISS: StatusStyle("#d1c4e9", "#5e35b1", "C", 1),
    LOGPROB_DRIFT: StatusStyle("#ffe082", "#b26a00", "~", 2),
    PROMPT_LOGPROB_DRIFT: StatusStyle("#ffcc80", "#e65100", "p", 2),
    TOKEN_DIVERGENCE: StatusStyle("#ef9a9a", "#c62828", "\u2717", 3),
    ERROR: StatusStyle("#bdbdbd", "#212121", "!", 4),
})
UNKNOWN_STYLE = StatusStyle("#eeeeee", "#757575", "?", 5)
VERDICT_COLOURS = MappingProxyType({"pass": "#2e7d32", "fail": "#c62828", "error": "#e65100"})
TIER_COLOURS = MappingProxyType({"device": "#1565c0", "host": "#00897b", "storage": "#8e24aa"})
OTHER_TIER_COLOUR = "#757575"


def style_of(status: Any) -> StatusStyle:
    return STATUS_STYLES.get(str(status), UNKNOWN_STYLE)
