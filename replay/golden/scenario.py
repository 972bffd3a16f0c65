"""Scenarios: seeded, branching, multi-turn conversations, declared as data.

A scenario is a `ScenarioSpec` (a built-in preset or a TOML file). `build_plan` turns it into a
`Plan`: one shared prefix per group and the request tree in topological order. Every random token
comes from numpy's PCG64 seeded with `spec.seed`, drawn in a fixed order, so a plan is the same on
every machine. Goldens store the drawn tokens, so replay never re-runs this RNG.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from replay.utils.errors import UsageError
from replay.golden.tree import TreeNode, request_id


# Bounds on every size (a scenario is user input): generous for real tests, far below what
# would hang the tool, exhaust memory or wrap the int32 token ids.
LIMITS = {
    "groups": 100_000, "branches": 100_000, "turns": 10_000, "prefix_len": 2**24,
    "suffix_len": 2**24, "turn_suffix_len": 2**24, "max_new_tokens": 2**20, "top_k": 1024,
    "token_lo": 2**31 - 2, "token_hi": 2**31 - 1, "seed": 2**64 - 1,
}
MAX_REQUESTS = 1_000_000
MAX_TOTAL_TOKENS = 2**28  # output tokens, and input tokens drawn, over the whole scenario


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    groups: int  # conversations groups, each with its own shared prefix
    branches: int  # branches per group, forking after the prefix
    prefix_len: int  # shared prefix tokens per group
    suffix_len: int  # each branch's own first suffix
    turns: int  # follow-up turns after the first
    turn_suffix_len: int  # fresh tokens appended per follow-up turn
    max_new_tokens: int  # per turn
    token_lo: int = 100  # random token ids are drawn from [token_lo, token_hi)
    token_hi: int = 4000
    top_k: int = 5
    seed: int = 0
    # N: the requests of the last N groups also ask for prompt logprobs from their parent's
    # input end (turn 0: from the group's prefix end), so the parent's output and their own new
    # tokens are scored while the parent's prompt still comes from the cache (docs/scenarios.md)
    prompt_logprobs: int = 0
    # N: every request of the first N groups sends a cache key of its own (SGLang's
    # `extra_key`), so it must reuse nothing, however much of it another request computed
    salted: int = 0

    def __post_init__(self) -> None:
        not_ints = [f.name for f in fields(self) if f.name != "name" and (
            isinstance(getattr(self, f.name), bool) or not isinstance(getattr(self, f.name), int))]
        if not_ints:
            raise UsageError(f"scenario {self.name!r}: {', '.join(not_ints)} must be integers")
        checks = {
            "groups": self.groups >= 1,
            "branches": self.branches >= 1,
            "prefix_len": self.prefix_len >= 0,
            "suffix_len": self.suffix_len >= 0,
            "turns": self.turns >= 0,
            "turn_suffix_len": self.turn_suffix_len >= 0,
            "max_new_tokens": self.max_new_tokens >= 1,
            "token_lo": self.token_lo >= 0,
            "token_hi": self.token_hi > self.token_lo,
            "top_k": self.top_k >= 0,
            "seed": self.seed >= 0,
            "prompt_logprobs": 0 <= self.prompt_logprobs <= self.groups,
            "salted": 0 <= self.salted <= self.groups,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise UsageError(f"scenario {self.name!r}: invalid value for {', '.join(bad)}")
        if self.prefix_len + self.suffix_len == 0:
            raise UsageError(f"scenario {self.name!r}: prefix_len + suffix_len must be > 0")
        self._check_bounds()

    def _check_bounds(self) -> None:
        """Sizes past these would hang, exhaust memory or wrap int32 silently (docs/scenarios.md)."""
        too_big = [f"{k} = {getattr(self, k)} (at most {limit})" for k, limit in LIMITS.items()
                   if getattr(self, k) > limit]
        inputs = self.groups * self.prefix_len + self.requests * max(self.suffix_len,
                                                                     self.turn_suffix_len)
        totals = {"requests (groups x branches x (1 + turns))": (self.requests, MAX_REQUESTS),
                  "output tokens (requests x max_new_tokens)":
                      (self.requests * self.max_new_tokens, MAX_TOTAL_TOKENS),
                  "input tokens drawn": (inputs, MAX_TOTAL_TOKENS)}
        too_big += [f"{what} = {n} (at most {limit})" for what, (n, limit) in totals.items()
                    if n > limit]
        if too_big:
            raise UsageError(f"scenario {self.name!r}: too large: {'; '.join(too_big)}")

    @property
    def requests(self) -> int:
        return self.groups * self.branches * (1 + self.turns)

    def to_dict(self) -> dict[str, Any]:
        """The spec as stored in a golden; `prompt_logprobs` and `salted` only when on, so that
        a golden without them reads (and fingerprints) as before."""
        data = asdict(self)
        for flag in OPTIONAL_FLAGS:
            if not data[flag]:
                del data[flag]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ScenarioSpec":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise UsageError(f"unknown scenario key(s): {', '.join(unknown)}")
        missing = sorted(n for n in names if n not in data and n not in _DEFAULTED)
        if missing:
            raise UsageError(f"scenario is missing key(s): {', '.join(missing)}")
        for k, v in data.items():
            if k == "name":
                if not isinstance(v, str):
                    raise UsageError("scenario key 'name' must be a string")
            elif not isinstance(v, int) or isinstance(v, bool):
                raise UsageError(f"scenario key {k!r} must be an integer, got {v!r}")
        return cls(**data)


OPTIONAL_FLAGS = ("prompt_logprobs", "salted")
_DEFAULTED = {"token_lo", "token_hi", "top_k", "seed", *OPTIONAL_FLAGS}

PRESETS: dict[str, ScenarioSpec] = {
    # The seed's test: 3 groups x 3 branches share a 512-token prefix, fork with 64 tokens,
    # then 2 follow-up turns of +32 tokens; 160 new tokens cross a 128-token track boundary.
    "hicache-branching": ScenarioSpec(
        name="hicache-branching", groups=3, branches=3, prefix_len=512, suffix_len=64,
        turns=2, turn_suffix_len=32, max_new_tokens=160,
    ),
    # Detection per server token (docs/faults.md): every injected fault class at 18% of the
    # server tokens hicache-branching sends (39% of those it computes; docs/benchmarks.md).
    # 3 groups x 2 branches x 2 turns; turn 0's 100 new tokens cross the 256 track boundary
    # during decode and end its pages at 320, off a boundary (largest-group-hit and
    # checkpoint-on-shorter-key need that); group 0's requests carry cache keys of their own
    # (salted), group 2's ask for prompt logprobs, group 1 is plain. Replayed on a `hicache`
    # engine with a 1024-token device pool (detection.CI_QUICK_ENGINE) so pages travel to host
    # and back.
    "ci-quick": ScenarioSpec(
        name="ci-quick", groups=3, branches=2, prefix_len=128, suffix_len=96,
        turns=1, turn_suffix_len=16, max_new_tokens=100, salted=1, prompt_logprobs=1,
    ),
    # SGLang's real HiCache on a CPU (docs/sglang-cpu.md), prompt-only reuse: 8 groups x 4
    # branches share a 576-token prefix (4.5 pages of 128); 8 prefixes (4,608 tokens) outgrow the
    # 4,096-token device pool, so with the interleave schedule (g0b0, g1b0, ... g7b0, g0b1, ...)
    # a group's prefix has gone to host when its next branch comes and is loaded back.
    "cpu-prompt-reuse": ScenarioSpec(
        name="cpu-prompt-reuse", groups=8, branches=4, prefix_len=576, suffix_len=64,
        turns=0, turn_suffix_len=0, max_new_tokens=8,
    ),
    # The same server, multi-turn: a follow-up turn's hit covers its parent's prompt AND the KV
    # its parent's decode steps wrote (576 prompt + 160 generated -> a 640-token hit).
    "cpu-branching": ScenarioSpec(
        name="cpu-branching", groups=2, branches=2, prefix_len=512, suffix_len=64,
        turns=1, turn_suffix_len=32, max_new_tokens=160,
    ),
    # Prompts that hold a 4096-token vocabulary's last id (4095) where prompt logprobs are asked:
    # ids drawn from its top 32, every group scored. SGLang 0.5.17-0.5.23 report that id as 0 in
    # input_token_logprobs (docs/findings/sglang-ids.md); the replay names it as the server's.
    "vocab-edge": ScenarioSpec(
        name="vocab-edge", groups=2, branches=2, prefix_len=64, suffix_len=32, turns=1,
        turn_suffix_len=16, max_new_tokens=16, token_lo=4064, token_hi=4096, prompt_logprobs=2,
    ),
    "single": ScenarioSpec(
        name="single", groups=1, branches=1, prefix_len=0, suffix_len=128,
        turns=0, turn_suffix_len=0, max_new_tokens=32,
    ),
    "deep": ScenarioSpec(
        name="deep", groups=1, branches=1, prefix_len=256, suffix_len=32,
        turns=7, turn_suffix_len=32, max_new_tokens=64,
    ),
    "wide": ScenarioSpec(
        name="wide", groups=16, branches=4, prefix_len=256, suffix_len=32,
        turns=1, turn_suffix_len=16, max_new_tokens=32,
    ),
}


def load_scenario(name_or_path: str) -> ScenarioSpec:
    """A preset by name, or a TOML file with the ScenarioSpec keys at top level."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        known = ", ".join(PRESETS)
        raise UsageError(f"no preset or file named {name_or_path!r} (presets: {known})")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    return ScenarioSpec.from_dict(data)


def with_overrides(spec: ScenarioSpec, **overrides: int | None) -> ScenarioSpec:
    """The spec with the given non-None fields replaced (e.g. --seed, --top-k)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(spec, **given) if given else spec


@dataclass(frozen=True)
class Plan:
    spec: ScenarioSpec
    prefixes: list[np.ndarray]
    requests: list[TreeNode]  # topological: turn-major, then group, then branch


def build_plan(spec: ScenarioSpec) -> Plan:
    rng = np.random.Generator(np.random.PCG64(spec.seed))

    def draw(n: int) -> np.ndarray:
        return rng.integers(spec.token_lo, spec.token_hi, size=n, dtype=np.int64).astype(np.int32)

    prefixes = [draw(spec.prefix_len) for _ in range(spec.groups)]
    requests: list[TreeNode] = []
    index: dict[tuple[int, int, int], int] = {}
    for turn in range(spec.turns + 1):
        for g in range(spec.groups):
            for b in range(spec.branches):
                n_new = spec.suffix_len if turn == 0 else spec.turn_suffix_len
                parent = -1 if turn == 0 else index[(g, b, turn - 1)]
                index[(g, b, turn)] = len(requests)
                requests.append(TreeNode(
                    id=request_id(g, b, turn), group=g, branch=b, turn=turn, parent=parent,
                    new_tokens=draw(n_new), max_new_tokens=spec.max_new_tokens,
                ))
    return Plan(spec=spec, prefixes=prefixes, requests=requests)


def check_vocab(spec: ScenarioSpec, vocab_size: int | None) -> None:
    """Refuse a scenario that would send token ids the server's vocabulary does not have."""
    if vocab_size is not None and spec.token_hi > vocab_size:
        raise UsageError(
            f"scenario {spec.name!r} draws token ids up to {spec.token_hi - 1}, but the server's "
            f"vocabulary has {vocab_size} tokens: lower token_hi"
        )
