"""`golden minimize --out DIR`: checked before the search, published whole or not at all.

`staged_out_dir` refuses an `--out` that could never be published (a file, a symbolic link,
dangling or not, a non-empty directory without `--force`, or with `--force` a directory that is
not a previous minimize output) and creates the hidden staging directory beside it, before the
search starts: a read-only or missing parent fails at once, not after an hour of replays. The
outputs are then written into the staging directory and renamed into place together
(replay/golden/atomic_dir.py): a full disk or a kill leaves the previous `--out` (or none), never
a golden without its record or an empty executable `repro.sh`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from replay.golden.atomic_dir import publish, staging_sibling
from replay.utils.errors import UsageError

MARKER = "minimize.json"  # what marks a directory as a previous output, replaceable with --force


def check_out_dir(out: Path, force: bool) -> None:
    """Refuse an `--out` the outputs could not replace (one line, before any replay)."""
    if out.is_symlink():
        what = "a dangling symbolic link" if not out.exists() else "a symbolic link"
        raise UsageError(f"--out {out} is {what}; name the directory itself")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise UsageError(f"{out} exists and is not empty; pass --force to overwrite")
        if not (out / MARKER).is_file():
            raise UsageError(f"{out} is not the output of `golden minimize` (it has no {MARKER});"
                             " refusing to replace it")


@contextlib.contextmanager
def staged_out_dir(out: Path, force: bool) -> Iterator[Path]:
    """Check `out`, yield an empty staging directory beside it; publish it as `out` when the
    block ends normally, remove it when the block raises."""
    check_out_dir(out, force)
    target = Path(os.path.abspath(out))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = staging_sibling(target)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write beside it "
                         f"({exc.strerror or exc})") from None
    published = False
    try:
        yield tmp
        check_out_dir(out, force)  # again: something may have appeared during the search
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()  # an empty directory is replaced without --force
        publish(tmp, target, force=force, marker=MARKER)
        published = True
    except OSError as exc:  # e.g. a full disk: name the output, not the staging directory
        raise OSError(exc.errno, exc.strerror or str(exc), _public_name(exc, tmp, out)) from None
    finally:
        if not published:
            shutil.rmtree(tmp, ignore_errors=True)


def _public_name(exc: OSError, tmp: Path, out: Path) -> str:
    name = str(exc.filename) if exc.filename else ""
    if name.startswith(str(tmp)):
        return str(out / os.path.relpath(name, tmp))
    return name or str(out)
