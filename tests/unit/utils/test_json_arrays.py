"""JSON arrays that may be sequences made when read (replay/utils/json_arrays.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from replay.utils.json_arrays import as_plain, is_array, json_chunks

DOC = {"schema": "s", "verdict": "fail", "empty_list": [], "empty_dict": {}, "none": None,
       "nested": {"a": [1, 2.5, -0.0, 1e-300, "é\u2028\"q\"", True, False, None],
                  "b": [[], {}, [[1], {"x": {}}]]},
       "keys": {1: "int", 2.5: "float", True: "bool", None: "none"}, "tuple": (1, 2),
       "requests": [{"id": "g0/b0/t0", "passed": True, "detail": {"ulp": [0, "inf"]}}]}


class Lazy(Sequence):
    """Items made when read, like a replay's request entries."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if not 0 <= i < self.n:
            raise IndexError(i)
        return {"id": f"r{i}", "passed": i % 2 == 0}


def test_pieces_join_into_what_json_dumps_with_indent_1_writes():
    assert "".join(json_chunks(DOC)) == json.dumps(DOC, indent=1, allow_nan=False)


def test_a_sequence_made_when_read_is_written_as_the_list_it_holds():
    lazy = {"requests": Lazy(3), "none": Lazy(0)}
    plain = {"requests": list(Lazy(3)), "none": []}
    assert "".join(json_chunks(lazy)) == json.dumps(plain, indent=1)


def test_nan_is_refused_as_strict_json_refuses_it():
    with pytest.raises(ValueError):
        "".join(json_chunks({"x": [float("nan")]}))


def test_is_array_takes_any_sequence_but_never_text():
    assert is_array([]) and is_array((1,)) and is_array(Lazy(2))
    assert not is_array("abc") and not is_array(b"abc") and not is_array({"a": 1})
    assert not is_array(None)


def test_as_plain_lets_the_compact_encoder_write_a_sequence_and_refuses_the_rest():
    assert json.dumps({"r": Lazy(2)}, default=as_plain) == json.dumps({"r": list(Lazy(2))})
    with pytest.raises(TypeError, match="object"):
        json.dumps({"r": object()}, default=as_plain)
