"""One object per distinct small value, where a value comes once per request.

A replay of 100k requests holds, per request, a dict of cached tokens per tier (from each
answer, and from the golden's JSON): a few distinct values a run, each made anew 100k times.
`SharedValues` hands back the first equal one it was given, so each distinct value is held once.
It belongs to one run (never module state); a value it hands out is shared and must not be
changed in place (readers copy before they edit: replay/report/entries.py).
"""

from __future__ import annotations

from typing import Any


class SharedValues:
    """`shared(d)`: the first dict equal to `d` (same items, same order) seen by this table."""

    def __init__(self) -> None:
        self._seen: dict[tuple[tuple[Any, Any], ...], dict[Any, Any]] = {}

    def __call__(self, value: dict[Any, Any]) -> dict[Any, Any]:
        try:
            return self._seen.setdefault(tuple(value.items()), value)
        except TypeError:  # an unhashable item: held as it is
            return value

    def __len__(self) -> int:
        return len(self._seen)
