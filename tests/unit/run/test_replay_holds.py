"""What a replay holds per request (replay/run/replayer.py): its outcome, with an equal
cached-tokens-per-tier answer held once, and the answer's digest as 32 bytes."""

from __future__ import annotations

from replay.golden.scenario import ScenarioSpec, build_plan
from replay.jobs import session
from tests.support.stub_server import StubConfig, StubServer

SPEC = ScenarioSpec(name="holds", groups=3, branches=2, turns=1, prefix_len=32, suffix_len=4,
                    turn_suffix_len=4, max_new_tokens=4, top_k=2, seed=5)


def test_equal_cached_token_details_are_one_object_and_digests_are_32_bytes(tmp_path):
    golden = tmp_path / "g.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        session.record_golden(build_plan(SPEC), golden, session.ServerTarget(url=stub.url))
    with StubServer(StubConfig()) as stub:
        doc = session.replay_golden(golden, session.ServerTarget(url=stub.url))
    outcomes = doc["requests"].outcomes
    distinct = {tuple(o.cached_details.items()) for o in outcomes}
    assert len(outcomes) == 12 and len(distinct) < len(outcomes)
    assert len({id(o.cached_details) for o in outcomes}) == len(distinct)
    assert all(len(o.answer_digest) == 32 for o in outcomes)
