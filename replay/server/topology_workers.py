"""What each worker of a topology is given beyond its launch profile: the topology's
`worker_args` and `worker_env` (docs/topologies.md), with `{worker}` (the worker's index) and
`{shared_storage}` (the one storage directory every worker shares) filled in.

Why per worker: the workers of a topology are launches of one profile, so without a value of
their own they all get the same argv and environment, and nothing could put worker i on GPU i
(`CUDA_VISIBLE_DEVICES = "{worker}"`, or `--base-gpu-id {worker}`). And a storage backend that
reads its directory from the environment (SGLang's file backend:
`SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR`) can only be pointed at the shared directory through
`worker_env`. A topology with `shared_storage = true` that places `{shared_storage}` nowhere
gives every worker `--storage-dir DIR` (the embedded engine's flag), as before these keys.

And which worker served each request, read back from the router's debug log
(`read_attribution`: the k-th time an id appears is its k-th repeat).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import string
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from replay.server.launch import strip_ansi
from replay.utils.errors import UsageError

WORKER_PLACEHOLDERS = ("worker", "shared_storage")
STORAGE_DIR_ARGS = ("--storage-dir", "{shared_storage}")


def parse_worker_templates(table: dict[str, Any], *, name: str,
                           shared_storage: bool) -> tuple[tuple[str, ...], dict[str, str]]:
    """`worker_args` (a list of strings) and `worker_env` (a table of strings) of a topology
    table, their placeholders checked: a UsageError names what is wrong."""
    where = f"topology {name!r}"
    args, env = table.get("worker_args", []), table.get("worker_env", {})
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise UsageError(f"{where}: worker_args must be a list of strings")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise UsageError(f"{where}: worker_env must be a table of strings")
    used = _placeholders(where, [*args, *env.values()])
    unknown = sorted(used - set(WORKER_PLACEHOLDERS))
    if unknown:
        raise UsageError(f"{where}: unknown placeholder(s) "
                         f"{', '.join('{' + u + '}' for u in unknown)} in worker_args/worker_env "
                         f"(known: {', '.join('{' + p + '}' for p in WORKER_PLACEHOLDERS)})")
    if "shared_storage" in used and not shared_storage:
        raise UsageError(f"{where}: worker_args/worker_env use {{shared_storage}}, but the "
                         "topology shares no storage (set shared_storage = true)")
    return tuple(args), dict(env)


def worker_launch(args: Sequence[str], env: Mapping[str, str], index: int,
                  shared: Path | None) -> tuple[list[str], dict[str, str]]:
    """Worker `index`'s own arguments and variables, rendered; with a shared directory placed
    nowhere, `--storage-dir DIR` first."""
    if shared is not None and "shared_storage" not in _placeholders("", [*args, *env.values()]):
        args = [*STORAGE_DIR_ARGS, *args]
    values = {"worker": str(index), "shared_storage": str(shared) if shared else ""}
    return ([a.format_map(values) for a in args],
            {k: v.format_map(values) for k, v in env.items()})


@contextlib.contextmanager
def shared_directory(parent: Path, name: str) -> Iterator[Path]:
    """The storage directory every worker of one launch shares, fresh, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"{name}-shared-storage-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _placeholders(where: str, templates: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for template in templates:
        try:
            found |= {n for _, n, _, _ in string.Formatter().parse(template) if n is not None}
        except ValueError as exc:  # an unmatched brace
            raise UsageError(f"{where}: bad placeholder syntax in {template!r}: {exc}") from None
    return found


_SENT = re.compile(r'request_id="([^"]+)".*Sending request url=(\S+)')


def read_attribution(router_log: Path, worker_index: dict[str, int]) -> dict[str, list[int]]:
    """request id -> worker indexes, in the order the router sent them (its debug log)."""
    sent: dict[str, list[int]] = {}
    try:
        text = router_log.read_text(errors="replace")
    except OSError:
        return sent
    for line in text.splitlines():
        match = _SENT.search(strip_ansi(line))
        if not match:
            continue
        url = match.group(2).rstrip("/")
        for base, index in worker_index.items():
            if url == base or url.startswith(base + "/"):
                sent.setdefault(match.group(1), []).append(index)
                break
    return sent
