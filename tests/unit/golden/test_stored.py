"""A golden opened from disk (`open_golden`): checked whole, then read request by request, each
request the very one the whole-golden reader gives, holding only a few chunks, and never a mix
of two goldens when the directory changes under it."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace
from pathlib import Path

import numpy as np
import pytest

from replay.golden.model import SupportsNodes, subset_golden
from replay.golden.store import open_golden, read_golden
from replay.golden.stored import StoredRequests
from replay.golden.tree import TreeColumns
from replay.utils.errors import GoldenFormatError
from tests.support import paths
from tests.unit.golden.test_stream import golden, same_requests, written

COMMITTED = Path(__file__).resolve().parents[3] / "goldens"


def chunked(tmp_path: Path, requests: int = 24, prompt: bool = False, rows: int = 32,
            whole: int = 32) -> Path:
    """A layout-3 golden of `requests` (more than `whole` positions), in chunks of `rows`."""
    written(golden(requests, prompt=prompt), tmp_path / "g.zarr", chunk_rows=rows,
            whole_rows=whole)
    return tmp_path / "g.zarr"


@pytest.mark.parametrize("name", ["hicache-branching", "deep", "wide", "single"])
def test_a_committed_golden_opened_gives_the_requests_read_golden_gives(name):
    opened = open_golden(COMMITTED / f"{name}.zarr")
    same_requests(opened, read_golden(COMMITTED / f"{name}.zarr"))


def test_a_layout_1_golden_opened_gives_the_requests_read_golden_gives():
    path = paths.DATA / "layout1" / "hicache-branching.zarr"
    same_requests(open_golden(path), read_golden(path))


@pytest.mark.parametrize("prompt", [False, True])
def test_a_chunked_golden_opened_gives_the_requests_it_was_written_with(tmp_path, prompt):
    opened = open_golden(chunked(tmp_path, prompt=prompt))
    assert isinstance(opened.requests, StoredRequests)
    same_requests(opened, golden(prompt=prompt))


def test_an_opened_golden_holds_a_few_chunks_of_each_array_whatever_is_read(tmp_path):
    opened = open_golden(chunked(tmp_path, requests=40, rows=16))
    stored = opened.requests
    assert isinstance(stored, StoredRequests)
    for i in [*range(len(stored)), *reversed(range(len(stored)))]:
        stored[i]
        opened.input_ids(i)
        assert all(len(a._held) <= a.keep <= 4 for a in stored.arrays.values())


def test_requests_read_hold_no_chunk_once_it_is_dropped(tmp_path):
    """A request's arrays are its own rows, never views: requests kept (in flight) while others
    are read would otherwise pin a copy of every chunk they came from."""
    opened = open_golden(chunked(tmp_path, requests=40, rows=16))
    kept = [opened.requests[i] for i in range(len(opened.requests))]
    nodes = [opened.nodes[i] for i in range(len(opened.requests))]
    arrays = [a for r in kept for a in (r.output_ids, r.new_tokens, r.logprobs)]
    arrays += [n.new_tokens for n in nodes] + [opened.output_of(i) for i in range(len(kept))]
    assert all(a.base is None and not a.flags.writeable for a in arrays)


def test_the_arrays_of_an_opened_golden_cannot_be_written_by_mistake(tmp_path):
    request = open_golden(chunked(tmp_path)).requests[3]
    with pytest.raises(ValueError):
        request.logprobs[0] = 0.0
    with pytest.raises(ValueError):
        request.top_ids[0, 0] = 1


def test_read_golden_gives_requests_with_writable_arrays_of_their_own(tmp_path):
    read = read_golden(chunked(tmp_path))
    assert isinstance(read.requests, list)
    read.requests[0].logprobs[0] = 0.0
    assert read.requests[1].logprobs.flags.writeable and read.requests[1].logprobs.base is None


def test_a_golden_replaced_after_it_was_opened_is_an_error_not_a_mix_of_two(tmp_path):
    path = chunked(tmp_path)
    opened = open_golden(path)
    other = golden()
    other.requests[20].logprobs[:] = -0.25  # another recording, same shape
    shutil.rmtree(path)
    written(other, path, chunk_rows=32)
    with pytest.raises(GoldenFormatError, match="changed while the golden was read"):
        [r.logprobs for r in opened.requests]


def test_a_chunk_deleted_after_the_golden_was_opened_is_an_error_naming_the_golden(tmp_path):
    path = chunked(tmp_path)
    opened = open_golden(path)
    for chunk in (path / "top_logprobs_rest" / "c").rglob("*"):
        if chunk.is_file():
            chunk.unlink()
    with pytest.raises(GoldenFormatError, match=f"{path}: unreadable chunk"):
        list(opened.requests)


def test_the_tree_of_an_opened_golden_is_walked_without_reading_any_answer(tmp_path):
    opened = open_golden(chunked(tmp_path))
    stored = opened.requests
    assert isinstance(stored, SupportsNodes)
    nodes = list(opened.nodes)
    assert [(n.id, n.parent, n.turn) for n in nodes] == [
        (r.id, r.parent, r.turn) for r in golden().requests]
    assert not any(stored.arrays[name]._held for name in ("logprobs", "top_ids_rest",
                                                          "top_logprobs_rest"))


def test_the_columns_of_an_opened_golden_and_its_subset_are_its_nodes_fields_read_from_nothing(
        tmp_path):
    opened, whole = open_golden(chunked(tmp_path)), golden()
    stored = opened.requests
    assert isinstance(stored, StoredRequests)
    for mine, theirs in ((opened, whole), (subset_golden(opened, [5, 23]),
                                           subset_golden(whole, [5, 23]))):
        expected = TreeColumns.of(theirs.requests)
        for name in ("group", "branch", "turn", "parent", "new_lengths"):
            assert getattr(mine.columns, name).tolist() == getattr(expected, name).tolist(), name
    assert not any(a._held for a in stored.arrays.values())


def test_the_output_lengths_of_an_opened_golden_and_its_subset_are_read_from_no_answer(tmp_path):
    opened, whole = open_golden(chunked(tmp_path)), golden()
    stored = opened.requests
    assert isinstance(stored, StoredRequests)
    assert opened.output_lengths().tolist() == [len(r.output_ids) for r in whole.requests]
    sub, sub_whole = subset_golden(opened, [5, 23]), subset_golden(whole, [5, 23])
    assert sub.output_lengths().tolist() == sub_whole.output_lengths().tolist()
    assert not any(a._held for a in stored.arrays.values())


def test_a_subset_of_an_opened_golden_is_the_subset_of_the_golden_in_memory(tmp_path):
    opened = open_golden(chunked(tmp_path))
    keep = [5, 17, 23]
    sub = subset_golden(opened, keep, shard={"index": 1})
    assert isinstance(sub.requests, StoredRequests)
    same_requests(sub, subset_golden(golden(), keep))
    assert sub.meta["shard"] == {"index": 1}


def test_an_opened_golden_rebuilds_every_input_as_the_golden_in_memory_does(tmp_path):
    opened, whole = open_golden(chunked(tmp_path)), golden()
    for i in range(len(whole.requests)):
        assert opened.input_ids(i).tobytes() == whole.input_ids(i).tobytes()


def test_a_top1_exception_lands_on_its_own_row_when_a_request_spans_two_chunks(tmp_path):
    # chunks of 7 rows: every request of 10 positions crosses a chunk boundary
    opened = open_golden(chunked(tmp_path, rows=7))
    for r in opened.requests:
        assert r.top_ids[3, 0] == 499 and np.array_equal(r.top_ids[4:, 0], r.output_ids[4:])


def test_opening_a_golden_holds_no_chunk_of_any_array(tmp_path):
    # chunks of 4,096 rows: the request table's one chunk is padded far past its 24 rows
    path = chunked(tmp_path, rows=4096)
    stored = open_golden(path).requests
    assert isinstance(stored, StoredRequests)
    meta = json.loads((path / "requests" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"][0] == 4096
    assert {name: len(a._held) for name, a in stored.arrays.items()} == {
        name: 0 for name in stored.arrays}


def windows_of(requests: StoredRequests, positions: int) -> SimpleNamespace:
    return SimpleNamespace(requests=[r for w in requests.windows(positions) for r in w])


@pytest.mark.parametrize("positions", [1, 7, 25, 10_000])
def test_windows_give_the_requests_read_one_by_one(tmp_path, positions):
    whole = golden(prompt=True)
    for r in whole.requests[3::5]:  # requests stored without top-k between ones with it
        r.top_ids = r.top_logprobs = None
    written(whole, tmp_path / "g.zarr", chunk_rows=7, whole_rows=7)
    stored = open_golden(tmp_path / "g.zarr").requests
    assert isinstance(stored, StoredRequests)
    same_requests(windows_of(stored, positions), SimpleNamespace(requests=list(stored)))


@pytest.mark.parametrize("name", ["hicache-branching", "deep"])
def test_windows_of_a_committed_golden_give_its_requests(name):
    stored = open_golden(COMMITTED / f"{name}.zarr").requests
    assert isinstance(stored, StoredRequests)
    same_requests(windows_of(stored, 64), SimpleNamespace(requests=list(stored)))


def test_windows_of_a_layout_1_golden_give_its_requests():
    stored = open_golden(paths.DATA / "layout1" / "hicache-branching.zarr").requests
    assert isinstance(stored, StoredRequests)
    same_requests(windows_of(stored, 64), SimpleNamespace(requests=list(stored)))


def test_windows_of_a_subset_give_the_subsets_requests(tmp_path):
    sub = subset_golden(open_golden(chunked(tmp_path)), [5, 17, 23]).requests
    assert isinstance(sub, StoredRequests)
    same_requests(windows_of(sub, 25), SimpleNamespace(requests=list(sub)))


def test_the_requests_of_a_window_cannot_be_written_by_mistake(tmp_path):
    stored = open_golden(chunked(tmp_path, prompt=True)).requests
    assert isinstance(stored, StoredRequests)
    for r in next(iter(stored.windows(10_000))):
        for a in (r.output_ids, r.logprobs, r.top_ids, r.top_logprobs, r.new_tokens):
            assert not a.flags.writeable
