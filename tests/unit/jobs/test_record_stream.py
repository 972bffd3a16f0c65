"""`record_golden` writes one recording as it goes: a golden larger than a chunk is the golden
an in-memory recording gives, an interrupted one keeps its finished requests in the journal
and resumes to the same golden, and a small one is the byte-for-byte golden of before."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.golden.store import read_golden, write_golden
from replay.golden.scenario import ScenarioSpec, build_plan
from replay.jobs import session
from replay.run.journal import journal_path
from replay.utils.errors import GoldenError
from tests.support.stub_server import StubConfig, StubServer

SPEC = ScenarioSpec(name="stream", groups=3, branches=2, prefix_len=16, suffix_len=4, turns=1,
                    turn_suffix_len=4, max_new_tokens=8, top_k=3, seed=3)
CHUNK = 20  # output positions a chunk: the 12 requests of 8 tokens need 5 chunks


def arrays_of(path: Path) -> list[tuple[str, bytes, bytes, bytes, bytes]]:
    g = read_golden(path)
    return [(r.id, r.output_ids.tobytes(), r.logprobs.tobytes(), r.top_ids.tobytes(),
             r.top_logprobs.tobytes()) for r in g.requests]


def array_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.parent != root}


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mem") / "mem.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        golden = session.record_in_memory(build_plan(SPEC), session.ServerTarget(url=stub.url))
    write_golden(golden, out)
    return out


def test_a_recording_larger_than_a_chunk_is_the_golden_an_in_memory_recording_gives(in_memory, tmp_path):
    out = tmp_path / "g.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        recorded = session.record_golden(build_plan(SPEC), out, session.ServerTarget(url=stub.url),
                                         chunk_rows=CHUNK)
    assert (recorded.requests, recorded.output_tokens) == (SPEC.requests, SPEC.requests * 8)
    assert arrays_of(out) == arrays_of(in_memory)
    assert not journal_path(out).exists()


def test_a_recording_that_fits_one_chunk_is_byte_for_byte_the_in_memory_golden(in_memory, tmp_path):
    out = tmp_path / "g.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        session.record_golden(build_plan(SPEC), out, session.ServerTarget(url=stub.url))
    assert array_files(out) == array_files(in_memory)  # the root differs: another stub's URL


def _fail_from(first: int):
    def tamper(n: int, ids: list[int], response: dict) -> dict:
        if n >= first:  # no top-k: the recorder refuses the answer and the recording stops
            meta = response["meta_info"]
            meta["output_top_logprobs"] = [[] for _ in meta["output_top_logprobs"]]
            for key in [k for k in meta if "top" in k and "flat" in k]:
                del meta[key]
        return response
    return tamper


def test_an_interrupted_chunked_recording_keeps_its_finished_requests_and_resumes_to_the_same_golden(
        in_memory, tmp_path):
    out, plan = tmp_path / "g.zarr", build_plan(SPEC)
    with StubServer(StubConfig(radix=False, tamper=_fail_from(7))) as stub:
        with pytest.raises(GoldenError):
            session.record_golden(plan, out, session.ServerTarget(url=stub.url),
                                  client=session.ClientOptions(concurrency=1),
                                  chunk_rows=CHUNK)
    finished = journal_path(out).read_text().count("\n") - 1  # the first line is the header
    assert not out.exists() and 5 <= finished < SPEC.requests
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".g.zarr.tmp")] == []
    with StubServer(StubConfig(radix=False)) as stub:
        session.record_golden(plan, out, session.ServerTarget(url=stub.url), resume=True,
                              chunk_rows=CHUNK)
        sent = stub.requests
    assert sent == SPEC.requests - finished
    assert arrays_of(out) == arrays_of(in_memory)
