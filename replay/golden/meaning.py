"""What a golden must mean, beyond its bytes.

Checksums prove that a golden's bytes are the ones written; they do not prove that the golden can
judge anything. A tampered golden with recomputed checksums, or a reference recorded from a
broken server, verifies byte for byte and then replays as a meaningless PASS. These functions
check the meaning (`golden verify` and every replay call them; the storage layer itself stays a
bit-exact store of whatever it is given):

- there is something to compare: at least one request and one output token;
- the tree is a conversation tree: a request has turn 0 exactly when it has no parent, else its
  parent's turn + 1 (cache expectations are judged per turn, so a golden whose turns are all 0
  would switch them off);
- each request has exactly `max_new_tokens` outputs (generation ignores EOS);
- every logprob is a log-probability: finite and <= 0 (a NaN compares equal to itself bit for
  bit, so a NaN reference would pass against the same broken server);
- token ids are in [0, vocabulary size) (in [0, 2^31) when the vocabulary is unknown), top-k
  rows hold distinct ids, and the top-k width is the scenario's;
- when the scenario asks for top-k, every request holds it and every output position holds at
  least one top-k entry (the reference's own choice): a request or a row without any compares
  nothing, so a reference that sent none (or rows emptied by hand) would replay as a PASS
  against the same broken server.
The recorder refuses a reference that breaks the logprob or the top-k rule (`logprob_problem`,
`top_k_missing`), so such a golden is never written in the first place.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from replay.utils.errors import GoldenFormatError
from replay.golden.fingerprint import vocab_size
from replay.golden.model import Golden, RecordedRequest, SupportsNodes
from replay.golden.store import open_golden, verify_golden

MAX_PROBLEMS = 20


def verify_meaning(path: Path) -> list[str]:
    """Every problem of the golden at `path`: its bytes (`verify_golden`), then its meaning."""
    problems = verify_golden(path)
    return problems or meaning_problems(open_golden(path, verify=False))


def check_meaning(golden: Golden, name: str) -> Golden:
    """The golden, or GoldenFormatError naming its first problem of meaning."""
    problems = meaning_problems(golden)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise GoldenFormatError(f"{name}: {problems[0]}{more}")
    return golden


def logprob_problem(logprobs: np.ndarray, top_ids: np.ndarray | None = None,
                    top_logprobs: np.ndarray | None = None) -> str | None:
    """Where logprobs stop being log-probabilities (NaN, infinite or positive), or None.
    Top-k entries count where an id is present (-1 marks an absent one)."""
    bad = ~(logprobs <= 0) | np.isinf(logprobs)  # NaN fails `<= 0`
    if bad.any():
        p = int(np.argmax(bad))
        return f"logprob {float(logprobs[p])!r} at output position {p}"
    if top_ids is not None and top_logprobs is not None and top_ids.size:
        bad_top = (top_ids >= 0) & (~(top_logprobs <= 0) | np.isinf(top_logprobs))
        if bad_top.any():
            p, j = (int(x) for x in np.argwhere(bad_top)[0])
            return (f"top-k logprob {float(top_logprobs[p, j])!r} at output position {p} "
                    f"(rank {j})")
    return None


def top_k_missing(top_ids: np.ndarray | None, outputs: int, k: int) -> str | None:
    """Why a request asked for top-`k` holds none where it should (no top-k at all, or an
    output position with no entry), or None."""
    if k <= 0 or outputs == 0:
        return None
    if top_ids is None:
        return f"no top-k, but top-{k} was asked"
    if top_ids.ndim == 2 and top_ids.shape[0] == outputs:
        empty = ~(top_ids >= 0).any(axis=1)
        if empty.any():
            return (f"no top-k entry at output position {int(np.argmax(empty))} (of "
                    f"{int(empty.sum())} such), but top-{k} was asked")
    return None


def meaning_problems(golden: Golden) -> list[str]:
    """Everything that makes the golden unable to judge a replay ([] when it is sound). The
    requests are read once, a window of them at a time, so a golden read from disk
    (`open_golden`) is checked without being held."""
    reqs = golden.requests
    if not len(reqs):
        return ["it holds no requests: a replay would compare nothing"]
    vocab = vocab_size(_dict(golden.meta.get("model_info")), _dict(golden.meta.get("server_info")))
    limit = vocab if vocab is not None else 2**31
    k = golden.top_k
    want_k = golden.scenario.get("top_k")
    asked = max(k, want_k if isinstance(want_k, int) else 0)
    found = _Found()
    for window in _windows(reqs):
        found.read(window, limit, k, asked)
    problems: list[str] = []
    if found.outputs == 0:
        problems.append("it holds no output tokens: a replay would compare nothing")
    problems += found.tree
    problems += _id_problems("prefix", golden.prefixes, limit)
    problems += found.new_ids[:1] + found.output_ids[:1]
    if isinstance(want_k, int) and want_k > 0 and k != want_k:
        problems.append(f"top-k width {k}, but its scenario asks for {want_k}")
    problems += found.top_missing + found.lengths + found.values
    return problems[:MAX_PROBLEMS]


WINDOW_POSITIONS = 1 << 14  # output positions checked at once


def _windows(reqs: Sequence[RecordedRequest]) -> Iterator[list[RecordedRequest]]:
    if isinstance(reqs, SupportsNodes):  # read from disk: each window's arrays read at once
        yield from reqs.windows(WINDOW_POSITIONS)
        return
    window: list[RecordedRequest] = []
    positions = 0
    for r in reqs:
        window.append(r)
        positions += len(r.output_ids)
        if positions >= WINDOW_POSITIONS:
            yield window
            window, positions = [], 0
    if window:
        yield window


@dataclass
class _Found:
    """What the windows found, per kind, in golden order (at most MAX_PROBLEMS of each)."""

    outputs: int = 0
    new_ids: list[str] = field(default_factory=list)
    output_ids: list[str] = field(default_factory=list)
    top_missing: list[str] = field(default_factory=list)
    lengths: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    tree: list[str] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)  # of every request read so far

    def read(self, reqs: list[RecordedRequest], limit: int, k: int, asked: int) -> None:
        self.outputs += sum(len(r.output_ids) for r in reqs)
        self._read_tree(reqs)
        if not self.new_ids:
            self.new_ids = _id_problems("new_tokens", [r.new_tokens for r in reqs], limit, reqs)
        if not self.output_ids:
            self.output_ids = _id_problems("output_ids", [r.output_ids for r in reqs], limit,
                                           reqs)
        for r in reqs:
            missing = top_k_missing(r.top_ids, len(r.output_ids), asked)
            if missing and len(self.top_missing) < MAX_PROBLEMS:
                self.top_missing.append(
                    f"request {r.id}: {missing} (a replay would compare no top-k there)")
            if len(r.output_ids) != r.max_new_tokens and len(self.lengths) < MAX_PROBLEMS:
                self.lengths.append(f"request {r.id}: {len(r.output_ids)} output tokens, but "
                                    f"max_new_tokens is {r.max_new_tokens}")
        if len(self.values) < MAX_PROBLEMS and not _values_sound(reqs, k, limit):
            self.values += _value_problems(reqs, limit)[:MAX_PROBLEMS - len(self.values)]

    def _read_tree(self, reqs: list[RecordedRequest]) -> None:
        """Each request is a node of a conversation tree: turn 0 exactly for a root, else its
        parent's turn + 1, the parent earlier in golden order (the first 3 that are not)."""
        turns = self.turns
        for r in reqs:
            i = len(turns)
            if r.parent < 0:
                ok = r.turn == 0
            else:
                ok = 0 <= r.parent < i and r.turn == turns[r.parent] + 1
            if not ok and len(self.tree) < 3:
                self.tree.append(f"request {r.id}: turn {r.turn} with parent {r.parent} is not a "
                                 "conversation tree (turn 0 exactly for roots, else the parent's "
                                 "turn + 1)")
            turns.append(r.turn)


def _values_sound(reqs: list[RecordedRequest], k: int, limit: int) -> bool:
    """One vectorized pass over the window's logprobs and top-k rows."""
    with_top = [r for r in reqs if r.top_ids is not None and r.top_logprobs is not None]
    everything = logprob_problem(
        np.concatenate([r.logprobs for r in reqs]),
        np.concatenate([r.top_ids for r in with_top]) if with_top else None,
        np.concatenate([r.top_logprobs for r in with_top]) if with_top else None)
    tops = [r.top_ids for r in with_top if r.top_ids.ndim == 2 and r.top_ids.shape[1] == k]
    top_rows_ok = len(tops) == len(with_top) and not _top_problems(
        "", np.concatenate(tops) if tops else np.empty((0, k), np.int32),
        sum(len(t) for t in tops), limit)
    return everything is None and top_rows_ok


def _value_problems(reqs: list[RecordedRequest], limit: int) -> list[str]:
    """Each request's own logprob and top-k problems, named (the window had some)."""
    problems: list[str] = []
    for r in reqs:
        problem = logprob_problem(r.logprobs, r.top_ids, r.top_logprobs)
        if problem:
            problems.append(f"request {r.id}: {problem} is not a log-probability")
        if r.top_ids is not None:
            problems += _top_problems(r.id, r.top_ids, len(r.output_ids), limit)
    return problems


def _id_problems(what: str, parts: list[np.ndarray], limit: int,
                 reqs: list[Any] | None = None) -> list[str]:
    if not parts:
        return []
    flat = np.concatenate([np.asarray(p).ravel() for p in parts])
    if not flat.size or (flat.min() >= 0 and flat.max() < limit):
        return []
    where = int(np.argmax((flat < 0) | (flat >= limit)))
    owner, start = 0, 0
    for owner, part in enumerate(parts):
        if where < start + np.asarray(part).size:
            break
        start += np.asarray(part).size
    name = reqs[owner].id if reqs is not None else f"group {owner}"
    return [f"{what} of {name}: token id {int(flat[where])} outside [0, {limit})"]


def _top_problems(request_id: str, ids: np.ndarray, n: int, limit: int) -> list[str]:
    if ids.ndim != 2 or ids.shape[0] != n:
        return [f"request {request_id}: top-k has {ids.shape[0]} rows for {n} output tokens"]
    if ids.size and (ids.min() < -1 or ids.max() >= limit):
        return [f"request {request_id}: top-k token id outside [0, {limit})"]
    ordered = np.sort(ids, axis=1)
    dup = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    if dup.any():
        row = int(np.argwhere(dup)[0][0])
        return [f"request {request_id}: top-k row {row} lists a token id twice"]
    return []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
