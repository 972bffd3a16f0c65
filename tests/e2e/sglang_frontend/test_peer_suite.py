"""SGLang's own cache test kit, imported from the sglang wheel and run unchanged against the
embedded engine: on a clean engine every cache assert holds and the KL between decode logprobs
and a same-server prefill replay is exactly 0 (the threshold is the smallest positive float).

CI shape (2 groups x 2 branches, 128-token prefix, 2 follow-up turns, 144 new tokens, which cross
a 128-token track boundary) with a 768-token device pool, so pages travel to host (and storage)
and back; scripts/peer_detection.py runs the seed's full shape.
"""

from __future__ import annotations

import pytest

pytest.importorskip("sglang.test.kl_multiturn_utils",
                    reason="SGLang's test kit is not installed (scripts/install_sglang.sh)")

from sglang.test.kl_multiturn_utils import (  # noqa: E402
    make_mamba_decode_assert,
    test_input_output_logprobs_match_decode_cache_hit_helper as decode_cache_hit_helper,
    test_input_output_logprobs_match_helper as multiturn_helper,
)

from replay.engine.config import get_config  # noqa: E402
from replay.engine.model import HybridModel  # noqa: E402
from replay.engine.options import profile_options  # noqa: E402
from replay.engine.server import start_server  # noqa: E402
from tests.support.seed_kit import CI_SHAPE, KL_EXACT, kit_inputs, run_kit  # noqa: E402

POOL = 768
HICACHE_LIKE = ("hicache", "hicache-write-back", "hicache-layer-first", "hicache-storage")


@pytest.fixture(scope="module")
def model() -> HybridModel:
    return HybridModel(get_config("tiny"), 0, "cpu")


@pytest.mark.parametrize("profile", HICACHE_LIKE)
def test_prefill_cache_hit_kit_passes_with_zero_kl(model, profile):
    options = profile_options(profile, max_total_tokens=POOL)
    with start_server(options, model=model) as server:
        run_kit(server.url, CI_SHAPE, options.mamba_track_interval)
        cached = server.engine.cache.stats
    assert cached.host_hits > 0  # the kit's hits really came back from host


def test_decode_cache_hit_kit_with_interleaved_branches_passes_with_zero_kl(model):
    options = profile_options("hicache", max_total_tokens=POOL)
    prefixes, _, turns = kit_inputs(CI_SHAPE)
    with start_server(options, model=model) as server:
        decode_cache_hit_helper(
            server.url, "embedded", KL_EXACT, prefixes, turn_suffixes=turns,
            assert_decode_cached_tokens=make_mamba_decode_assert(options.mamba_track_interval),
            branches_per_group=CI_SHAPE.branches, max_new_tokens=CI_SHAPE.max_new_tokens)


def test_multiturn_kit_passes_greedy_with_zero_kl(model):
    options = profile_options("hicache", max_total_tokens=POOL)
    _, fulls, turns = kit_inputs(CI_SHAPE)
    with start_server(options, model=model) as server:
        multiturn_helper(
            server.url, "embedded", KL_EXACT, fulls[:2], turn_suffixes=[t[:2] for t in turns],
            assert_decode_cached_tokens=make_mamba_decode_assert(options.mamba_track_interval),
            max_new_tokens=CI_SHAPE.max_new_tokens, sampling_temperature=0)


def test_engine_answers_decode_with_sglangs_own_response_contract(model):
    """SGLang's typed API (sglang.api.v1) decodes every shape the engine sends: prompt and output
    logprobs with top-k, a prefill-only answer, a batch."""
    import json

    from sglang.api.v1.api_types import GenerateResponse

    from tests.unit.engine.test_http import call

    prompt = kit_inputs(CI_SHAPE)[1][0]
    bodies = [
        {"input_ids": prompt, "sampling_params": {"max_new_tokens": 4, "sampling_seed": 1},
         "return_logprob": True, "logprob_start_len": 3, "top_logprobs_num": 2},
        {"input_ids": prompt, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True},
        {"input_ids": [prompt, prompt[:9]], "sampling_params": {"temperature": 0}},
    ]
    with start_server(profile_options("hicache", max_total_tokens=POOL), model=model) as server:
        answers = [json.loads(call(server.url, "/generate", body)[1]) for body in bodies]
    decoded = [GenerateResponse.from_json_value(a) for a in answers[:2] + answers[2]]
    assert decoded[0].meta_info.input_top_logprobs[0] is None
    assert decoded[1].meta_info.completion_tokens == 0 and decoded[2].meta_info.cached_tokens > 0
