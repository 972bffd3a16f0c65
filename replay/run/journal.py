"""A crash-safe journal of completed requests, so an interrupted recording can resume.

While `golden record` runs, each completed request is appended as one JSON line to
`.NAME.zarr.journal` beside the target and fsynced. Arrays travel as base64 of their raw
little-endian bytes, so no bit is lost. A torn last line (the process was killed mid-write) is
ignored. The first line names the scenario (its full spec) and the server's model; `--resume`
refuses a journal written for anything else. The journal is deleted once the golden is in place.
One recorder at a time per target: `.NAME.zarr.journal.lock` is held (flock) while it records.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from replay.utils.errors import UsageError
from replay.server.apis.base import Completion

FORMAT = "golden-replay/journal/1"


def journal_path(target: Path) -> Path:
    return target.parent / f".{target.name}.journal"


def lock_path(journal: Path) -> Path:
    return journal.with_name(journal.name + ".lock")


def _lock(journal: Path) -> Any:
    """An exclusive lock for one recorder per target: a second one is refused at once rather
    than deleting the first one's journal."""
    journal.parent.mkdir(parents=True, exist_ok=True)
    f = open(lock_path(journal), "a")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise UsageError(f"another recording is writing the same golden (its journal {journal} "
                         "is locked): wait for it, or record into another --out") from None
    return f


def _b64(a: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode()


def _unb64(text: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=dtype).copy()


def encode(index: int, request_id: str, c: Completion) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "index": index, "id": request_id,
        "output_ids": _b64(c.output_ids, "<i4"), "logprobs": _b64(c.logprobs, "<f8"),
        "cached_tokens": c.cached_tokens, "cached_details": c.cached_details,
        "finish_reason": c.finish_reason, "prompt_tokens": c.prompt_tokens,
        "num_retractions": c.num_retractions,
    }
    if c.top_ids is not None and c.top_logprobs is not None:
        entry["top_k"] = int(c.top_ids.shape[1])
        entry["top_ids"] = _b64(c.top_ids, "<i4")
        entry["top_logprobs"] = _b64(c.top_logprobs, "<f8")
    if c.prompt_logprobs is not None:
        entry["prompt_logprobs"] = _b64(c.prompt_logprobs, "<f8")
    return entry


def decode(entry: dict[str, Any]) -> Completion:
    top_ids = top_lps = None
    if "top_k" in entry:
        k = entry["top_k"]
        top_ids = _unb64(entry["top_ids"], "<i4").reshape(-1, k).astype(np.int32)
        top_lps = _unb64(entry["top_logprobs"], "<f8").reshape(-1, k).astype(np.float64)
    return Completion(
        output_ids=_unb64(entry["output_ids"], "<i4").astype(np.int32),
        logprobs=_unb64(entry["logprobs"], "<f8").astype(np.float64),
        top_ids=top_ids, top_logprobs=top_lps, cached_tokens=entry["cached_tokens"],
        cached_details=entry["cached_details"], finish_reason=entry["finish_reason"],
        prompt_tokens=entry["prompt_tokens"],
        num_retractions=int(entry.get("num_retractions", 0)),  # absent in older journals
        prompt_logprobs=(_unb64(entry["prompt_logprobs"], "<f8").astype(np.float64)
                         if "prompt_logprobs" in entry else None),
    )


@dataclass
class Journal:
    """Append-only; one JSON line per completed request."""

    path: Path
    _file: Any = None
    _lock_file: Any = None

    @classmethod
    def start(cls, path: Path, header: dict[str, Any], resume: bool) -> tuple["Journal", dict[int, Completion]]:
        """Open for appending. With `resume`, load what an earlier run completed (the header
        must match); without it, an existing journal is replaced."""
        journal = cls(path, _lock_file=_lock(path))
        try:
            done: dict[int, Completion] = {}
            if resume:
                if not path.exists():
                    raise UsageError(f"--resume: no journal at {path} (nothing to resume)")
                done = cls._load(path, header)
            else:
                path.unlink(missing_ok=True)
            fresh = not path.exists()
            journal._file = open(path, "a", encoding="utf-8")
            if fresh:
                journal._append({"format": FORMAT, **header})
        except BaseException:
            journal.close()
            raise
        return journal, done

    @staticmethod
    def _load(path: Path, header: dict[str, Any]) -> dict[int, Completion]:
        lines = path.read_text(encoding="utf-8").split("\n")
        try:
            first = json.loads(lines[0])
        except json.JSONDecodeError:
            raise UsageError(f"--resume: {path} is not a golden-replay journal") from None
        if first.get("format") != FORMAT:
            raise UsageError(f"--resume: {path} is not a golden-replay journal")
        for key, value in header.items():
            if first.get(key) != value:
                raise UsageError(f"--resume: the journal at {path} was written for another {key}; "
                                 "run without --resume to start over")
        done: dict[int, Completion] = {}
        kept = [lines[0]]
        for line in lines[1:]:
            try:
                entry = json.loads(line)
                done[int(entry["index"])] = decode(entry)
            except (json.JSONDecodeError, KeyError, ValueError, TypeError):
                continue  # the torn last line of a killed writer
            kept.append(line)
        # rewrite without the torn line, so appends start on a fresh line
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("\n".join(kept) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return done

    def add(self, index: int, request_id: str, completion: Completion) -> None:
        self._append(encode(index, request_id, completion))

    def _append(self, obj: dict[str, Any]) -> None:
        try:
            self._file.write(json.dumps(obj) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:  # e.g. a full disk: name the journal
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.path)) from None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lock_file is not None:  # unlink, then unlock: a waiter never locks a ghost
            lock_path(self.path).unlink(missing_ok=True)
            self._lock_file.close()
            self._lock_file = None

