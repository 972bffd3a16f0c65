"""Layout 2 (`golden-replay/golden/2`): the chosen token stored once, exact in every tie case;
retraction counts kept; layout-1 goldens still read and verify unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from replay.golden import atomic_dir
from replay.golden.model import Golden, RecordedRequest
from replay.golden.store import read_golden, verify_golden, write_golden
from tests.support import paths

# Layout-1 goldens as first committed (goldens/ now holds re-recorded layout-2 ones).
COMMITTED = paths.DATA / "layout1"


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(atomic_dir, "_fsync", lambda path: None)


def greedy_request(i: int, n: int = 6, k: int = 4, **fields) -> RecordedRequest:
    """A greedy answer: rank 0 of every top row is the chosen token with the same logprob."""
    rng = np.random.default_rng(i)
    top_lp = -np.sort(rng.random((n, k)).astype(np.float32), axis=1).astype(np.float64)
    top_ids = np.stack([rng.choice(1000, size=k, replace=False) for _ in range(n)]).astype(np.int32)
    return RecordedRequest(
        id=f"g0/b{i}/t0", group=0, branch=i, turn=0, parent=-1,
        new_tokens=np.arange(3, dtype=np.int32), max_new_tokens=n,
        output_ids=top_ids[:, 0].copy(), logprobs=top_lp[:, 0].copy(),
        top_ids=top_ids, top_logprobs=top_lp, **fields)


def golden_of(*requests: RecordedRequest) -> Golden:
    return Golden(scenario={"name": "t"}, prefixes=[np.arange(5, dtype=np.int32)],
                  requests=list(requests), sampling={"temperature": 0}, meta={})


def attrs_of(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())["attributes"]


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(np.asarray(a, np.float64).view(np.uint64),
                          np.asarray(b, np.float64).view(np.uint64))


def test_new_goldens_say_layout_2(tmp_path: Path) -> None:
    path = write_golden(golden_of(greedy_request(0)), tmp_path / "g.zarr")
    assert attrs_of(path)["schema"] == "golden-replay/golden/2"


def test_greedy_top1_is_stored_once(tmp_path: Path) -> None:
    path = write_golden(golden_of(greedy_request(0), greedy_request(1)), tmp_path / "g.zarr")
    attrs = attrs_of(path)
    assert attrs["top1_exceptions"] == []
    assert attrs["arrays"]["top_ids_rest"]["shape"] == [12, 3]
    assert attrs["arrays"]["top_logprobs_rest"]["shape"] == [12, 3]
    back = read_golden(path).requests[1]
    assert np.array_equal(back.top_ids, greedy_request(1).top_ids)
    assert same(back.top_logprobs, greedy_request(1).top_logprobs)


def test_tie_where_the_chosen_token_is_not_rank_0_is_kept_exactly(tmp_path: Path) -> None:
    r = greedy_request(0)
    r.top_ids[2, [0, 1]] = r.top_ids[2, [1, 0]]  # the chosen token now sits at rank 1
    r.top_logprobs[2, 1] = r.top_logprobs[2, 0]  # an exact tie
    path = write_golden(golden_of(r), tmp_path / "g.zarr")
    assert [e[0] for e in attrs_of(path)["top1_exceptions"]] == [2]
    back = read_golden(path).requests[0]
    assert np.array_equal(back.top_ids, r.top_ids) and same(back.top_logprobs, r.top_logprobs)


def test_signed_zero_and_nan_payload_at_rank_0_are_kept_exactly(tmp_path: Path) -> None:
    r = greedy_request(0)
    r.logprobs[0] = 0.0
    r.top_logprobs[0, 0] = -0.0  # same value, other bits: an exception
    r.top_logprobs[1, 0] = np.array(0x7FF8000000000123, np.uint64).view(np.float64)
    r.top_ids[3, 0] = -1  # the server sent no rank-0 entry
    r.top_logprobs[3, 0] = np.nan
    back = read_golden(write_golden(golden_of(r), tmp_path / "g.zarr")).requests[0]
    assert np.array_equal(back.top_ids, r.top_ids)
    assert same(back.top_logprobs, r.top_logprobs) and same(back.logprobs, r.logprobs)


def test_request_without_top_k_beside_one_with_it_round_trips(tmp_path: Path) -> None:
    bare = dataclasses.replace(greedy_request(1), top_ids=None, top_logprobs=None)
    back = read_golden(write_golden(golden_of(greedy_request(0), bare, greedy_request(2)),
                                    tmp_path / "g.zarr"))
    assert back.requests[1].top_ids is None
    assert np.array_equal(back.requests[2].top_ids, greedy_request(2).top_ids)


def test_num_retractions_round_trip(tmp_path: Path) -> None:
    back = read_golden(write_golden(golden_of(greedy_request(0, num_retractions=3),
                                              greedy_request(1)), tmp_path / "g.zarr"))
    assert [r.num_retractions for r in back.requests] == [3, 0]


@pytest.mark.parametrize("name", ["single", "hicache-branching"])
def test_committed_layout_1_goldens_read_and_rewrite_as_layout_2_unchanged(
        name: str, tmp_path: Path) -> None:
    old_path = COMMITTED / f"{name}.zarr"
    assert attrs_of(old_path)["schema"] == "golden-replay/golden/1"
    assert verify_golden(old_path) == []
    old = read_golden(old_path)
    assert all(r.num_retractions == 0 for r in old.requests)
    new = read_golden(write_golden(old, tmp_path / "g.zarr"))
    for a, b in zip(old.requests, new.requests):
        assert np.array_equal(a.output_ids, b.output_ids) and same(a.logprobs, b.logprobs)
        assert np.array_equal(a.top_ids, b.top_ids) and same(a.top_logprobs, b.top_logprobs)
        assert np.array_equal(a.new_tokens, b.new_tokens) and a.cached_tokens == b.cached_tokens
    assert [np.array_equal(p, q) for p, q in zip(old.prefixes, new.prefixes)] == [True] * len(old.prefixes)


def test_truncated_blosc_chunk_is_refused_before_decoding(tmp_path: Path) -> None:
    path = write_golden(golden_of(greedy_request(0)), tmp_path / "g.zarr")
    chunk = path / "logprobs" / "c" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-3])
    assert verify_golden(path) == [
        "array logprobs: unreadable chunk (blosc header says 24 bytes in "
        f"{len(chunk.read_bytes()) + 3}, expected 24 in {len(chunk.read_bytes())}: truncated or corrupt)"]
