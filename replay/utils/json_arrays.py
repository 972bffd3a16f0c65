"""JSON documents whose arrays may be sequences made when read, written one item at a time.

A replay's report keeps its `requests` as a sequence that makes each entry when it is read
(replay/report/entries.py), so that the document of 100k requests is not 100k dicts. Every
reader that asks "is this an array?" asks `is_array` (a list, or any such sequence; never a
string); `json_chunks` writes a document as `json.dumps(doc, indent=1)` would, item by item,
so writing a report never builds its whole text; `as_plain` is the `default` that lets the
json module's C encoder take such a sequence where a canonical form is hashed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any


def is_array(value: Any) -> bool:
    """Whether `value` is a JSON array: a list, tuple or other sequence, never text."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def as_plain(value: Any) -> list[Any]:
    """`default` for json.dumps: a sequence that is not a list becomes one; else TypeError."""
    if is_array(value):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_chunks(value: Any, level: int = 0) -> Iterator[str]:
    """`value` as `json.dumps(value, indent=1, allow_nan=False)` writes it, in pieces: each
    array item and object member is made (and for a lazy sequence, read) only when its turn
    comes."""
    if isinstance(value, dict) and value:
        inner = "\n" + " " * (level + 1)
        yield "{"
        for n, (key, item) in enumerate(value.items()):
            yield ("," if n else "") + inner + _key(key) + ": "
            yield from json_chunks(item, level + 1)
        yield "\n" + " " * level + "}"
    elif is_array(value) and len(value):
        inner = "\n" + " " * (level + 1)
        yield "["
        for n, item in enumerate(value):
            yield ("," if n else "") + inner
            yield from json_chunks(item, level + 1)
        yield "\n" + " " * level + "]"
    elif is_array(value):
        yield "[]"
    else:
        yield json.dumps(value, allow_nan=False)


def _key(key: Any) -> str:
    """An object key as the json module writes it (a number, true, false or null as text)."""
    if isinstance(key, str):
        return json.dumps(key)
    if key is True or key is False or key is None:
        return json.dumps(json.dumps(key))
    if isinstance(key, float):
        return json.dumps(json.dumps(key, allow_nan=False))
    if isinstance(key, int):
        return json.dumps(int.__repr__(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
