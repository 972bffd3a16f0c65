"""The streaming golden writer: a small golden is written byte for byte as `write_golden`
writes it; a larger one is written chunk by chunk (layout 3), holding at most about one chunk,
and reads back as the very requests it was given."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from replay.golden.checks import attrs_sha256
from replay.golden.model import Golden, RecordedRequest
from replay.golden.store import read_golden, verify_golden, write_golden
from replay.golden.stream import GoldenWriter
from replay.utils.errors import GoldenFormatError

K = 3
POSITIONS = 10


def golden(requests: int = 24, prompt: bool = False) -> Golden:
    rng = np.random.default_rng(7)
    groups = requests // 4
    reqs = []
    for i in range(requests):
        turn, g, b = i // (groups * 2), (i // 2) % groups, i % 2
        ids = rng.integers(0, 500, POSITIONS).astype(np.int32)
        lps = -rng.random(POSITIONS)
        top_ids = rng.integers(0, 500, (POSITIONS, K)).astype(np.int32)
        top_lps = -rng.random((POSITIONS, K))
        top_ids[:, 0], top_lps[:, 0] = ids, lps
        top_ids[3, 0] = 499  # a top-1 that is not the chosen token: a top1 exception
        reqs.append(RecordedRequest(
            id=f"g{g}/b{b}/t{turn}", group=g, branch=b, turn=turn,
            parent=-1 if turn == 0 else i - groups * 2, new_tokens=np.arange(3, dtype=np.int32),
            max_new_tokens=POSITIONS, output_ids=ids, logprobs=lps, top_ids=top_ids,
            top_logprobs=top_lps, cached_tokens=i, cached_details={"device": i},
            finish_reason="length", num_retractions=i % 2,
            prompt_logprob_start=2 if prompt and turn else -1,
            prompt_logprobs=-rng.random(5) if prompt and turn else None))
    prefixes = [np.arange(6, dtype=np.int32) + g for g in range(groups)]
    return Golden(scenario={"name": "s"}, prefixes=prefixes, requests=reqs,
                  sampling={"temperature": 0.0}, meta={"server": "x"})


def written(g: Golden, path: Path, chunk_rows: int, order: list[int] | None = None,
            whole_rows: int | None = None) -> GoldenWriter:
    """`g` written by a GoldenWriter (held whole up to `whole_rows`, default `chunk_rows`)."""
    writer = GoldenWriter(path, g.prefixes, K, chunk_rows=chunk_rows,
                          whole_rows=chunk_rows if whole_rows is None else whole_rows)
    for i in order if order is not None else range(len(g.requests)):
        writer.add(i, g.requests[i])
    writer.finish(len(g.requests), g.scenario, g.sampling, g.meta)
    return writer


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def same_requests(a: Golden, b: Golden) -> None:
    assert [r.id for r in a.requests] == [r.id for r in b.requests]
    for x, y in zip(a.requests, b.requests):
        for name in ("output_ids", "logprobs", "top_ids", "top_logprobs", "new_tokens",
                     "prompt_logprobs"):
            u, v = getattr(x, name), getattr(y, name)
            assert (u is None) == (v is None), name
            if u is not None:
                assert np.asarray(u).tobytes() == np.asarray(v).tobytes(), (x.id, name)
        assert (x.cached_tokens, x.cached_details, x.num_retractions, x.parent,
                x.prompt_logprob_start) == (y.cached_tokens, y.cached_details,
                                            y.num_retractions, y.parent, y.prompt_logprob_start)


def test_a_golden_that_fits_one_chunk_is_written_byte_for_byte_as_write_golden_writes_it(tmp_path):
    g = golden()
    write_golden(g, tmp_path / "whole.zarr")
    writer = written(g, tmp_path / "streamed.zarr", chunk_rows=10_000,
                     order=random.Random(1).sample(range(len(g.requests)), len(g.requests)))
    assert not writer.streaming
    assert files(tmp_path / "streamed.zarr") == files(tmp_path / "whole.zarr")


@pytest.mark.parametrize("prompt", [False, True])
def test_a_golden_larger_than_a_chunk_reads_back_as_the_requests_given(tmp_path, prompt):
    g = golden(prompt=prompt)
    order = random.Random(2).sample(range(len(g.requests)), len(g.requests))
    writer = written(g, tmp_path / "g.zarr", chunk_rows=32, order=order)
    assert writer.streaming
    attrs = json.loads((tmp_path / "g.zarr" / "zarr.json").read_text())["attributes"]
    assert attrs["schema"] == "golden-replay/golden/3"
    assert verify_golden(tmp_path / "g.zarr") == []
    back = read_golden(tmp_path / "g.zarr")
    same_requests(back, g)
    assert (back.scenario, back.sampling, back.meta) == (g.scenario, g.sampling, g.meta)


def test_a_chunked_golden_is_stored_in_chunks_of_the_given_rows(tmp_path):
    written(golden(), tmp_path / "g.zarr", chunk_rows=32)
    meta = json.loads((tmp_path / "g.zarr" / "output_ids" / "zarr.json").read_text())
    assert meta["shape"] == [24 * POSITIONS]
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [32]
    assert len(list((tmp_path / "g.zarr" / "output_ids" / "c").iterdir())) == -(-240 // 32)


def test_a_golden_of_at_most_whole_rows_is_written_whole_whatever_the_chunk_size(tmp_path):
    writer = written(golden(), tmp_path / "g.zarr", chunk_rows=32, whole_rows=240)  # 240 positions
    assert not writer.streaming
    meta = json.loads((tmp_path / "g.zarr" / "output_ids" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [240]


def test_a_golden_past_whole_rows_is_written_in_chunks_of_chunk_rows(tmp_path):
    g = golden()  # 240 positions
    writer = written(g, tmp_path / "g.zarr", chunk_rows=16, whole_rows=100)
    assert writer.streaming
    meta = json.loads((tmp_path / "g.zarr" / "output_ids" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [16]
    same_requests(read_golden(tmp_path / "g.zarr"), g)


def test_the_writer_holds_at_most_a_chunk_and_a_request_when_requests_arrive_in_order(tmp_path):
    g = golden(requests=40)
    writer = GoldenWriter(tmp_path / "g.zarr", g.prefixes, K, chunk_rows=32, whole_rows=32)
    most = 0
    for i, r in enumerate(g.requests):
        writer.add(i, r)
        most = max(most, writer.held_rows)
    writer.finish(len(g.requests), g.scenario, g.sampling, g.meta)
    assert most <= 32 + POSITIONS


@pytest.mark.parametrize("whole_rows", [10_000, 32])
def test_the_writer_gives_back_the_output_ids_of_every_request_it_was_given(tmp_path, whole_rows):
    """A recording builds later turns from them (held whole, early, buffered or written)."""
    g = golden(requests=40)
    writer = GoldenWriter(tmp_path / "g.zarr", g.prefixes, K, chunk_rows=16, whole_rows=whole_rows)
    given: list[int] = []
    for i in random.Random(3).sample(range(len(g.requests)), len(g.requests)):
        writer.add(i, g.requests[i])
        given.append(i)
        for j in given:
            assert writer.output_of(j).tobytes() == g.requests[j].output_ids.tobytes(), (i, j)
    assert writer.streaming == (whole_rows == 32)


def test_a_request_that_arrives_early_is_held_until_the_ones_before_it_arrive(tmp_path):
    g = golden()
    writer = GoldenWriter(tmp_path / "g.zarr", g.prefixes, K, chunk_rows=32, whole_rows=32)
    for i in range(1, 6):
        writer.add(i, g.requests[i])
    assert writer.next == 0 and sorted(writer.pending) == [1, 2, 3, 4, 5]
    writer.add(0, g.requests[0])
    assert writer.next == 6 and not writer.pending


def test_a_writer_interrupted_by_an_exception_leaves_neither_the_golden_nor_its_temp_directory(tmp_path):
    g = golden()
    with pytest.raises(KeyboardInterrupt):
        with GoldenWriter(tmp_path / "g.zarr", g.prefixes, K, chunk_rows=32, whole_rows=32) as writer:
            for i, r in enumerate(g.requests[:10]):
                writer.add(i, r)
            assert writer.streaming
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_finishing_a_golden_with_a_request_never_given_is_refused(tmp_path):
    g = golden()
    writer = GoldenWriter(tmp_path / "g.zarr", g.prefixes, K, chunk_rows=32, whole_rows=32)
    for i, r in enumerate(g.requests):
        if i != 7:
            writer.add(i, r)
    with pytest.raises(GoldenFormatError, match="request 7 was never recorded"):
        writer.finish(len(g.requests), g.scenario, g.sampling, g.meta)


def test_a_request_given_twice_is_refused(tmp_path):
    g = golden()
    writer = GoldenWriter(tmp_path / "g.zarr", g.prefixes, K)
    writer.add(0, g.requests[0])
    with pytest.raises(GoldenFormatError, match="given twice"):
        writer.add(0, g.requests[0])


def test_a_corrupted_chunk_of_a_chunked_golden_is_reported(tmp_path):
    written(golden(), tmp_path / "g.zarr", chunk_rows=32)
    chunk = tmp_path / "g.zarr" / "logprobs" / "c" / "2"
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF
    chunk.write_bytes(bytes(data))
    assert any("logprobs" in p for p in verify_golden(tmp_path / "g.zarr"))


def test_a_layout_2_golden_split_into_chunks_is_refused(tmp_path):
    """Only layout 3 may be chunked: a layout-2 golden of several chunks is not one this tool
    wrote."""
    written(golden(), tmp_path / "g.zarr", chunk_rows=32)
    root = tmp_path / "g.zarr" / "zarr.json"
    meta = json.loads(root.read_text())
    attrs = meta["attributes"]
    attrs["schema"] = "golden-replay/golden/2"
    attrs["attrs_sha256"] = attrs_sha256(attrs)
    root.write_text(json.dumps(meta))
    assert any("a blosc array must be one chunk" in p for p in verify_golden(tmp_path / "g.zarr"))
