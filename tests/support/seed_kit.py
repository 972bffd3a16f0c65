"""SGLang's own cache test kit (sglang/test/kl_multiturn_utils.py), configured like the seed test
and run unchanged against a server: the peer suite and the side-by-side detection table use it.

The seed's shape: 3 groups x 3 branches share a 512-token prefix, each branch forks with its own
tokens, then 2 follow-up turns; the follow-up turns are sent in interleaved order
(g0b0, g1b0, ...). Prefix seeding, the cache-hit asserts and the final same-server prefill replay
with its KL comparison are the helper's own. The sizes of the fork, the turns and the output
follow the committed `hicache-branching` golden, so both tools see the same conversation shape.
"""

from __future__ import annotations

import io
import random
import re
from collections.abc import Callable
from contextlib import redirect_stdout
from dataclasses import dataclass, field

from sglang.test.kl_multiturn_utils import (
    default_prefill_cache_assert,
    make_mamba_decode_assert,
    test_input_output_logprobs_match_prefill_cache_hit_helper as prefill_cache_hit_helper,
)

KL_EXACT = 5e-324  # the smallest positive float: only a KL of exactly 0 stays below it


@dataclass(frozen=True)
class KitShape:
    groups: int
    branches: int
    prefix_len: int
    fork_len: int
    turn_len: int
    turns: int
    max_new_tokens: int
    vocab: int = 4096
    seed: int = 456


SEED_SHAPE = KitShape(groups=3, branches=3, prefix_len=512, fork_len=64, turn_len=32, turns=2,
                      max_new_tokens=160)
CI_SHAPE = KitShape(groups=2, branches=2, prefix_len=128, fork_len=32, turn_len=16, turns=2,
                    max_new_tokens=144)


def kit_inputs(shape: KitShape) -> tuple[list[list[int]], list[list[int]], list[list[list[int]]]]:
    """Prefixes, full first-turn prompts and per-turn suffixes, as the kit's mixin builds them."""
    rng = random.Random(shape.seed)
    prefixes, fulls = [], []
    for _ in range(shape.groups):
        prefix = [rng.randint(1, shape.vocab - 1) for _ in range(shape.prefix_len)]
        for _ in range(shape.branches):
            prefixes.append(list(prefix))
            fulls.append(prefix + [rng.randint(1, shape.vocab - 1) for _ in range(shape.fork_len)])
    turns = [[[rng.randint(1, shape.vocab - 1) for _ in range(shape.turn_len)] for _ in fulls]
             for _ in range(shape.turns)]
    return prefixes, fulls, turns


def run_kit(url: str, shape: KitShape, track_interval: int, *, temperature: float = 1.0,
            prefill_assert: Callable | None = None, decode_assert: Callable | None = None,
            kl_threshold: float = KL_EXACT) -> None:
    """SGLang's prefill-cache-hit helper with the seed's asserts; raises on the first failure."""
    prefixes, fulls, turns = kit_inputs(shape)
    prefill_cache_hit_helper(
        url, "embedded", kl_threshold,
        prefix_input_ids=prefixes, full_input_ids=fulls, turn_suffixes=turns,
        assert_prefill_cached_tokens=prefill_assert or default_prefill_cache_assert,
        assert_decode_cached_tokens=decode_assert or make_mamba_decode_assert(track_interval),
        branches_per_group=shape.branches, max_new_tokens=shape.max_new_tokens,
        sampling_temperature=temperature,
    )


@dataclass
class KitOutcome:
    """What the kit saw: the average KL it printed, and every cache assert that failed."""

    kl: float | None = None
    kl_failed: bool = False
    cache_failures: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def caught(self) -> bool:
        return self.kl_failed or bool(self.cache_failures) or self.error is not None


def observe_kit(url: str, shape: KitShape, track_interval: int,
                temperature: float = 1.0) -> KitOutcome:
    """`run_kit`, but the cache asserts record their failures instead of stopping the run, so the
    KL of the same run is seen too (the helper itself is unchanged: asserts are its parameters)."""
    outcome = KitOutcome()

    def recording(check: Callable) -> Callable:
        def record(*args):
            try:
                check(*args)
            except AssertionError as exc:
                outcome.cache_failures.append(str(exc))
        return record

    printed = io.StringIO()
    try:
        with redirect_stdout(printed):
            run_kit(url, shape, track_interval, temperature=temperature,
                    prefill_assert=recording(default_prefill_cache_assert),
                    decode_assert=recording(make_mamba_decode_assert(track_interval)))
    except AssertionError as exc:
        if "avg_kl_div" not in str(exc):
            raise
        outcome.kl_failed = True
    except Exception as exc:  # the helper could not finish (a malformed answer, a 4xx/5xx)
        outcome.error = f"{type(exc).__name__}: {exc}"
    found = re.findall(r"avg_kl_div=([0-9eE.+-]+|nan|inf)", printed.getvalue())
    outcome.kl = float(found[-1]) if found else None
    return outcome
