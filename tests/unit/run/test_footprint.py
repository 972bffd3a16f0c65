"""The footprint the eviction-pressure rule compares with the server's pool
(replay/run/replayer.py `footprint`): each group's prefix once, every request's new tokens and
output, whatever the tree's shape."""

from __future__ import annotations

import numpy as np

from replay.golden.model import Golden, RecordedRequest
from replay.run.replayer import footprint


def request(i: int, parent: int, new: int, out: int) -> RecordedRequest:
    return RecordedRequest(
        id=f"g0/b{i}/t{0 if parent < 0 else 1}", group=0, branch=i, turn=0 if parent < 0 else 1,
        parent=parent, new_tokens=np.zeros(new, np.int32), max_new_tokens=out,
        output_ids=np.zeros(out, np.int32), logprobs=np.zeros(out))


def test_a_shared_prefix_counts_once_and_every_branch_adds_its_own_tokens():
    golden = Golden(scenario={"name": "t"}, prefixes=[np.zeros(576, np.int32)],
                    requests=[request(0, -1, 64, 8), request(1, -1, 64, 8),
                              request(2, 0, 32, 160)], sampling={})
    assert footprint(golden) == 576 + (64 + 8) * 2 + (32 + 160)


def test_the_cpu_prompt_reuse_preset_outgrows_a_4096_token_pool():
    """8 x 576 + 32 x (64 + 8) = 6,912 tokens: the preset is built to put the pool under
    pressure (docs/sglang-cpu.md)."""
    from replay.golden.scenario import PRESETS, build_plan

    plan = build_plan(PRESETS["cpu-prompt-reuse"])
    golden = Golden(scenario={}, prefixes=plan.prefixes, sampling={}, requests=[
        RecordedRequest(**vars(n), output_ids=np.zeros(n.max_new_tokens, np.int32),
                        logprobs=np.zeros(n.max_new_tokens)) for n in plan.requests])
    assert footprint(golden) == 6912 > 4096
