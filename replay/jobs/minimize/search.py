"""Delta debugging over a failing replay: the smallest replay that still fails the same way.

The search knows nothing about servers or files. It proposes candidates (which requests of the
golden to keep, with which schedule, concurrency and repeat count) and a `Judge` replays each one
from an empty cache and says whether it fails the same way. Steps, coarse to fine: whole groups,
then conversations (one group/branch chain each), then trailing turns (ddmin, Zeller and
Hildebrandt 2002, over each kind of unit); then the replay options (simpler schedule, lower
concurrency, one repeat); then a last pass that removes single conversations and single last turns
under the options found, until none can go.

Invariants:
- every candidate's request set is ancestor-closed (a turn's input needs its parent's output) and
  never empty;
- a candidate is judged at most once (judgements are memoized), and the start is judged first:
  a start that does not fail (a flaky failure) is an error, never a "minimal" repro;
- the result is replayed once more at the end (outside the memo and the budget): a failure that
  went away during the search (a flaky or state-dependent one) is "not reproduced", never a repro;
- unless the budget ran out or that last rerun did not fail (the result says so), the result is
  1-minimal: removing any one remaining conversation, or the last turn of any one, makes the
  failure go away.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from replay.utils.errors import GoldenError, UsageError
from replay.run.runner import SCHEDULES
from replay.golden.tree import TreeNode, with_ancestors

U = TypeVar("U")


@dataclass(frozen=True)
class Candidate:
    """One replay to try: request indices of the original golden (ancestor-closed, sorted) and
    the replay options."""

    keep: tuple[int, ...]
    schedule: str
    concurrency: int
    repeat: int


@dataclass(frozen=True)
class Judgement:
    """How a candidate's replay went."""

    fails: bool  # failed the same way in at least one repeat
    failed_repeats: int  # how many repeats showed it
    failing: tuple[str, ...] = ()  # ids of the requests that failed the same way
    seconds: float = 0.0
    report: dict[str, Any] | None = field(default=None, compare=False, repr=False)


Judge = Callable[[Candidate], Judgement]
Progress = Callable[[str], None]


class NotFailing(GoldenError):
    """The starting replay does not fail (the same way): there is nothing to minimize."""


@dataclass(frozen=True)
class Budget:
    """When to stop searching: after this many seconds and/or replays (None: no limit). The
    start's rerun always happens, whatever the budget."""

    seconds: float | None = None
    runs: int | None = None

    def spent(self, seconds: float, runs: int) -> bool:
        return (self.seconds is not None and seconds >= self.seconds) or \
            (self.runs is not None and runs >= self.runs)


_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|runs?|replays?)?\s*$")


def parse_budget(text: str | None) -> Budget:
    """`600`, `600s`, `10m`, `1h` (seconds) or `40runs` (replays); None: unlimited."""
    if text is None:
        return Budget()
    m = _BUDGET.match(text.lower())
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"invalid --budget {text!r}: use SECONDS (600, 600s, 10m, 1h) or RUNS "
                         "(40runs)")
    value, unit = float(m.group(1)), m.group(2) or "s"
    if unit.startswith(("run", "replay")):
        if not value.is_integer():
            raise UsageError(f"invalid --budget {text!r}: a number of runs is a whole number")
        return Budget(runs=int(value))
    return Budget(seconds=value * {"s": 1, "m": 60, "h": 3600}[unit])


@dataclass
class Step:
    """One reduction step, as minimize.json records it."""

    name: str
    # what went: groups (g1), conversations (g0/b2), requests (g0/b1/t2), concurrency 16 -> 1
    removed: list[str] = field(default_factory=list)
    replays: int = 0
    seconds: float = 0.0
    requests_after: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.name, "removed": self.removed, "replays": self.replays,
                "seconds": round(self.seconds, 3), "requests_after": self.requests_after}


@dataclass
class Result:
    start: Candidate
    final: Candidate
    judgement: Judgement  # the final candidate's
    steps: list[Step]
    replays: int
    seconds: float
    budget_exhausted: bool
    rerun: Judgement  # the final candidate replayed once more, after the search

    @property
    def reproduced(self) -> bool:
        """Whether the final candidate still failed the same way when replayed again."""
        return self.rerun.fails

    @property
    def one_minimal(self) -> bool:
        return self.reproduced and not self.budget_exhausted

    @property
    def flaky(self) -> bool:
        return min(self.judgement.failed_repeats, self.rerun.failed_repeats) < self.final.repeat

    @property
    def verdict(self) -> str:
        """What the result is: `1-minimal`, `budget spent ...` or `not reproduced`."""
        if not self.reproduced:
            return "not reproduced"
        if self.budget_exhausted:
            return "budget spent (smallest failing replay found so far; may not be 1-minimal)"
        return "1-minimal"


class _OutOfBudget(Exception):
    pass


def ddmin(units: Sequence[U], fails: Callable[[list[U]], bool]) -> list[U]:
    """Zeller's ddmin: a subsequence of `units` that still `fails`, from which no single unit (and
    no chunk at the final granularity) can be removed. `fails(units)` is assumed true."""
    units = list(units)
    n = 2
    while len(units) >= 2:
        size = -(-len(units) // n)
        chunks = [units[i:i + size] for i in range(0, len(units), size)]
        for chunk in chunks:  # one chunk alone (coarse: keep little)
            if len(chunks) > 2 and fails(chunk):
                units, n = chunk, 2
                break
        else:
            for k in range(len(chunks)):  # everything but one chunk
                rest = [u for j, c in enumerate(chunks) if j != k for u in c]
                if fails(rest):
                    units, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(units):
                    break
                n = min(2 * n, len(units))
    return units


class Search:
    """One minimization: the tree, the judge, the memo and the bookkeeping of steps."""

    def __init__(self, nodes: Sequence[TreeNode], judge: Judge, budget: Budget = Budget(),
                 progress: Progress | None = None) -> None:
        self.nodes = nodes
        self.judge = judge
        self.budget = budget
        self.progress = progress or (lambda line: None)
        self.memo: dict[Candidate, Judgement] = {}
        self.replays = 0
        self.started = time.monotonic()
        self.steps: list[Step] = []
        self.current: Candidate | None = None  # the last candidate that failed: every step
        # moves to a failing candidate as soon as it finds one, so this is the best so far

    # -- judging ----------------------------------------------------------------------------

    def fails(self, cand: Candidate) -> bool:
        if not cand.keep:
            return False
        if cand not in self.memo:
            if self.replays and self.budget.spent(time.monotonic() - self.started, self.replays):
                raise _OutOfBudget
            judgement = self.judge(cand)
            self.replays += 1
            self.memo[cand] = judgement
            verdict = (f"fails ({len(judgement.failing)} failing the same way, "
                       f"{judgement.failed_repeats}/{cand.repeat} repeats)"
                       if judgement.fails else "passes")
            self.progress(f"  replay {self.replays}: {self.describe(cand)}: {verdict} "
                          f"[{judgement.seconds:.1f}s]")
        if self.memo[cand].fails:
            self.current = cand
        return self.memo[cand].fails

    def describe(self, cand: Candidate) -> str:
        return (f"{len(cand.keep)} requests in {len(self.conversations(cand.keep))} "
                f"conversation(s), {cand.schedule}, concurrency {cand.concurrency}, "
                f"repeat {cand.repeat}")

    # -- tree views -------------------------------------------------------------------------

    def conversations(self, keep: Sequence[int]) -> dict[tuple[int, int], list[int]]:
        """(group, branch) -> its kept request indices, by turn."""
        convs: dict[tuple[int, int], list[int]] = {}
        for i in keep:
            convs.setdefault((self.nodes[i].group, self.nodes[i].branch), []).append(i)
        return {k: sorted(v, key=lambda i: self.nodes[i].turn) for k, v in sorted(convs.items())}

    def closed(self, cand: Candidate, keep: Sequence[int]) -> Candidate:
        return replace(cand, keep=tuple(with_ancestors(self.nodes, keep)))

    # -- the search -------------------------------------------------------------------------

    def run(self, start: Candidate) -> Result:
        start = self.closed(start, start.keep)
        cand, exhausted = self.step("rerun the start", self.confirm, start), False
        try:
            for name, reduce in (("groups", self.reduce_groups),
                                 ("conversations", self.reduce_conversations),
                                 ("trailing turns", self.reduce_turns),
                                 ("options", self.reduce_options),
                                 ("one-minimal", self.one_minimal)):
                cand = self.step(name, reduce, cand)
        except _OutOfBudget:
            cand, exhausted = self.current or start, True
            self.progress("budget spent: the result is the smallest failing replay found so far "
                          "and may not be 1-minimal")
        rerun = self.rerun(cand)
        return Result(start=start, final=cand, judgement=self.memo[cand], steps=self.steps,
                      replays=self.replays, seconds=time.monotonic() - self.started,
                      budget_exhausted=exhausted, rerun=rerun)

    def rerun(self, cand: Candidate) -> Judgement:
        """The final candidate judged once more, bypassing the memo and the budget: the result
        claims only what this last replay showed."""
        judgement = self.judge(cand)
        self.replays += 1
        verdict = (f"still fails ({judgement.failed_repeats}/{cand.repeat} repeats)"
                   if judgement.fails else "passes: the failure did not reproduce")
        self.progress(f"rerun of the result: {self.describe(cand)}: {verdict} "
                      f"[{judgement.seconds:.1f}s]")
        return judgement

    def step(self, name: str, reduce: Callable[[Candidate, Step], Candidate],
             cand: Candidate) -> Candidate:
        step = Step(name)
        self.steps.append(step)
        replays, t0 = self.replays, time.monotonic()
        self.progress(f"step {name}: {self.describe(cand)}")
        try:
            cand = reduce(cand, step)
        finally:
            step.replays = self.replays - replays
            step.seconds = time.monotonic() - t0
            step.requests_after = len((self.current or cand).keep)
        self.progress(f"step {name} done: {self.describe(cand)}; removed "
                      f"{', '.join(step.removed) or 'nothing'} ({step.replays} replays, "
                      f"{step.seconds:.0f}s)")
        return cand

    def confirm(self, start: Candidate, step: Step) -> Candidate:
        if not self.fails(start):
            raise NotFailing(f"the starting replay ({self.describe(start)}) did not fail the same "
                             "way on a rerun: the failure is flaky; pass --repeat N to count a "
                             "failure in any of N repeats")
        return start

    def reduce_units(self, cand: Candidate, step: Step,
                     units: dict[str, list[int]]) -> Candidate:
        """ddmin over named units (each a set of request indices); what goes into `step`."""
        def fails(names: list[str]) -> bool:
            return self.fails(self.closed(cand, [i for n in names for i in units[n]]))

        try:
            kept = ddmin(list(units), fails)
        finally:  # on an exhausted budget too: what the best so far lacks
            best = set((self.current or cand).keep)
            step.removed += [n for n in units if not set(units[n]) & best]
        return self.closed(cand, [i for n in kept for i in units[n]])

    def reduce_groups(self, cand: Candidate, step: Step) -> Candidate:
        units: dict[str, list[int]] = {}
        for i in cand.keep:
            units.setdefault(f"g{self.nodes[i].group}", []).append(i)
        return self.reduce_units(cand, step, units)

    def reduce_conversations(self, cand: Candidate, step: Step) -> Candidate:
        units = {f"g{g}/b{b}": idx for (g, b), idx in self.conversations(cand.keep).items()}
        return self.reduce_units(cand, step, units)

    def reduce_turns(self, cand: Candidate, step: Step) -> Candidate:
        """First cut every conversation to its first t turns (smallest t first), then each
        conversation on its own."""
        turns = max(self.nodes[i].turn for i in cand.keep)
        for t in range(1, turns + 1):
            trial = self.closed(cand, [i for i in cand.keep if self.nodes[i].turn < t])
            if trial != cand and self.fails(trial):
                step.removed += self.ids(set(cand.keep) - set(trial.keep))
                cand = trial
                break
        for conv in self.conversations(cand.keep).values():
            for t in range(1, len(conv)):
                trial = self.closed(cand, [i for i in cand.keep if i not in conv[t:]])
                if self.fails(trial):
                    step.removed += self.ids(conv[t:])
                    cand = trial
                    break
        return cand

    def reduce_options(self, cand: Candidate, step: Step) -> Candidate:
        """A simpler schedule, then the lowest concurrency (one at a time first), then one
        repeat when every repeat failed."""
        for schedule in SCHEDULES[:SCHEDULES.index(cand.schedule)]:
            if self.fails(replace(cand, schedule=schedule)):
                step.removed.append(f"schedule {cand.schedule} -> {schedule}")
                cand = replace(cand, schedule=schedule)
                break
        concurrency = 1
        while concurrency < cand.concurrency:
            if self.fails(replace(cand, concurrency=concurrency)):
                step.removed.append(f"concurrency {cand.concurrency} -> {concurrency}")
                cand = replace(cand, concurrency=concurrency)
                break
            concurrency *= 2
        if cand.repeat > 1 and self.memo[cand].failed_repeats == cand.repeat \
                and self.fails(replace(cand, repeat=1)):
            step.removed.append(f"repeat {cand.repeat} -> 1")
            cand = replace(cand, repeat=1)
        return cand

    def one_minimal(self, cand: Candidate, step: Step) -> Candidate:
        """Remove single conversations and single last turns until none can go."""
        changed = True
        while changed:
            changed = False
            for conv in self.conversations(cand.keep).values():
                for gone in (conv, conv[-1:]) if len(conv) > 1 else (conv,):
                    trial = self.closed(cand, [i for i in cand.keep if i not in gone])
                    if self.fails(trial):
                        step.removed += self.ids(gone)
                        cand, changed = trial, True
                        break
                if changed:
                    break
        return cand

    def ids(self, indices: Sequence[int] | set[int]) -> list[str]:
        return [self.nodes[i].id for i in sorted(indices)]
