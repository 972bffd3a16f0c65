"""What opening a golden may cost: bounded memory and work, no link followed, no torn read.

A golden is input, and a hostile one is small: a few hundred bytes of metadata may declare an
array of 1e8 elements in 1e8 one-element chunks, or a 236 KB zstd chunk may expand to 2 GiB.
Before the reader touches an array it checks here that:

- every declared shape fits what the golden's own metadata implies (its scenario's sizes, each
  within `ScenarioSpec`'s bounds, and its request count): output arrays at most requests x
  max_new_tokens (x top-k), input arrays at most what the scenario draws;
- every array has at most `MAX_CHUNKS` chunks, and each zstd chunk declares (in its frame
  header) a decompressed size no larger than its chunk holds, so nothing decompresses past it;
- nothing inside the golden is a symbolic link (a link could point anywhere: /dev/zero, a file
  of another golden, a FIFO);
- the directory read is one directory: `golden update` replaces a golden by renaming a new one
  into place, and a reader that straddles the rename is retried (`read_stable`) rather than
  reporting a spurious checksum error.
The invariant: a golden that passes these checks is read in memory and time proportional to
what its metadata says a real recording held.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from replay.golden.scenario import LIMITS, MAX_REQUESTS, MAX_TOTAL_TOKENS

T = TypeVar("T")
MAX_CHUNKS = 65_536  # per array; the writer uses one
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
STABLE_READ_ATTEMPTS = 5


def declared_size_problems(attrs: dict[str, Any]) -> list[str]:
    """Arrays whose declared shape exceeds what the metadata implies (checked before reading).

    The scenario's sizes are used where it states them (every recorded golden does), each
    capped by `ScenarioSpec`'s bounds; a size it does not state falls back to the bound on a
    whole scenario (`MAX_TOTAL_TOKENS` elements)."""
    scenario = attrs["scenario"]

    def size(key: str, cap: int) -> int | None:
        value = scenario.get(key)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return min(value, cap) if ok else None

    n = len(attrs["request_ids"])
    k = attrs["top_k"]
    if n > MAX_REQUESTS or k > LIMITS["top_k"]:
        return [f"{n} requests of top-k {k}: larger than any scenario may be"]
    max_new = size("max_new_tokens", LIMITS["max_new_tokens"])
    groups = size("groups", LIMITS["groups"])
    prefix = size("prefix_len", LIMITS["prefix_len"])
    suffixes = [size(key, LIMITS[key]) for key in ("suffix_len", "turn_suffix_len")]

    def bound(value: int | None) -> int:
        return MAX_TOTAL_TOKENS if value is None else min(value, MAX_TOTAL_TOKENS)

    outputs = bound(None if max_new is None else n * max_new)
    limits = {
        "prefix_tokens": bound(None if groups is None or prefix is None else groups * prefix),
        "prefix_offsets": bound(None if groups is None else groups + 1),
        "requests": n * len(attrs.get("request_columns") or ()), "new_token_offsets": n + 1, "output_offsets": n + 1,
        "new_tokens": bound(None if None in suffixes else n * max(suffixes)),  # type: ignore[type-var]
        "output_ids": outputs, "logprobs": outputs,
        "top_ids": outputs * k, "top_logprobs": outputs * k,
        "top_ids_rest": outputs * k, "top_logprobs_rest": outputs * k,  # layout 2
    }
    problems = []
    for name, entry in attrs["arrays"].items():
        elements = _product(entry["shape"])
        if name in limits and elements > limits[name]:
            problems.append(f"array {name}: declared shape {entry['shape']} holds {elements} "
                            f"elements, more than its metadata implies ({limits[name]})")
    return problems


def chunk_count_problem(shape: list[int], chunk_shape: list[int]) -> str | None:
    count = _product([-(-n // c) for n, c in zip(shape, chunk_shape)])
    if count > MAX_CHUNKS:
        return f"{count} chunks declared (at most {MAX_CHUNKS})"
    return None


def chunk_size_problem(chunks: list[Path], chunk_shape: list[int], dtype: str) -> str | None:
    """The first chunk that would decode to more bytes than a chunk of `chunk_shape` holds:
    read from a zstd frame's header (a frame that does not state its size is refused, since its
    output would be unbounded), or the file's size for an uncompressed chunk."""
    most = _product(chunk_shape) * np.dtype(dtype).itemsize
    for chunk in chunks:
        try:
            with open(chunk, "rb") as f:
                head = f.read(18)
                size = f.seek(0, os.SEEK_END)
        except OSError as exc:
            return f"unreadable chunk ({exc.strerror or exc})"
        if head[:4] == ZSTD_MAGIC:
            size = zstd_content_size(head)
            if size is None:
                return "zstd chunk does not state its decompressed size (refused: unbounded)"
        if size > most:
            return f"chunk {chunk.name} decodes to {size} bytes, more than its {most} bytes of data"
    return None


def zstd_content_size(head: bytes) -> int | None:
    """The Frame_Content_Size of a zstd frame header (RFC 8878, 3.1.1.1), None if absent."""
    if len(head) < 6 or head[:4] != ZSTD_MAGIC:
        return None
    descriptor = head[4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or len(head) < pos + width:
        return None
    value = int.from_bytes(head[pos:pos + width], "little")
    return value + 256 if width == 2 else value


def symlink_problem(root: Path) -> str | None:
    """The first symbolic link inside the golden directory, if any (links are never followed)."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            if os.path.islink(os.path.join(dirpath, name)):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                return f"{rel} is a symbolic link (refused: a golden holds plain files only)"
    return None


def read_stable(read: Callable[[], T], path: Path, failed: Callable[[T], bool]) -> T:
    """`read()` again when the directory at `path` was replaced while it ran and the result
    `failed` (or raised): a reader racing `golden update`'s rename sees the old or the new
    golden, never a mix of both."""
    for attempt in range(STABLE_READ_ATTEMPTS):
        before = _identity(path)
        last = attempt == STABLE_READ_ATTEMPTS - 1
        try:
            result = read()
        except Exception:
            # Missing before and after is the middle of a replacement (moved aside, not yet
            # moved in): retried too, so only a golden that stays missing is reported.
            if last or (_identity(path) == before and before is not None):
                raise
        else:
            if last or not failed(result) or _identity(path) == before:
                return result
        time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out
