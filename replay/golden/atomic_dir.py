"""Publish a directory atomically: written beside the target, fsynced, renamed into place.

A reader only ever sees a complete directory or none. The directory is filled in a hidden
sibling (`.NAME.tmp-<pid>-<hex>`, same parent, so the rename cannot cross filesystems); every
file and directory in it is fsynced; then it is renamed to the target and the parent fsynced.
Overwriting takes two renames: the old directory is moved aside to `.NAME.old-<pid>-<hex>`, the
new one moved in, the old one deleted; an exception between them moves the old one back (a hard
kill there leaves nothing at the target and the old directory in its hidden sibling). On any
exception, KeyboardInterrupt included, the temp directory is removed.

With `force`, only a directory holding `marker` (a zarr.json for goldens) may be replaced, so a
slip like `-o ~` can never delete a home directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from replay.utils.errors import UsageError


def write_atomically(target: Path, fill: Callable[[Path], None], *, force: bool,
                     marker: str) -> None:
    """Create `target` (an absolute path) as a directory that `fill(tmp)` writes."""
    refuse_existing(target, force, marker)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(target, "tmp")
    try:
        fill(tmp)
        _fsync_tree(tmp)
        _move_into_place(tmp, target, force, marker)
    except BaseException:
        # Also on KeyboardInterrupt: never leave our own temp directory behind.
        _remove(tmp)
        raise


def publish(tmp: Path, target: Path, *, force: bool, marker: str) -> None:
    """Publish a directory the caller filled (a hidden sibling of `target`, e.g. from
    `staging_sibling`): fsync it, then rename it into place as `write_atomically` does."""
    _fsync_tree(tmp)
    _move_into_place(tmp, target, force, marker)


def staging_sibling(target: Path) -> Path:
    """A new empty hidden sibling of `target` to fill and then `publish` (the caller removes it
    if it never publishes)."""
    tmp = _sibling(target, "tmp")
    tmp.mkdir()
    return tmp


def refuse_existing(target: Path, force: bool, marker: str) -> None:
    """Without force, any existing path is refused; with force, only a directory holding
    `marker` may be replaced."""
    if not os.path.lexists(target):
        return
    if not force:
        raise UsageError(f"{target} exists; pass --force to overwrite")
    if target.is_symlink() or not target.is_dir() or not (target / marker).is_file():
        raise UsageError(f"{target} exists and is not a zarr directory; refusing to replace it")


def _sibling(target: Path, kind: str) -> Path:
    """A hidden sibling of target, unique to this process and call: `.NAME.tmp-<pid>-<hex>`."""
    return target.with_name(f".{target.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")


def _fsync_tree(root: Path) -> None:
    """fsync every file and directory under root, so the rename publishes durable data."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            _fsync(Path(dirpath) / name)
        _fsync(Path(dirpath))


def _fsync(path: Path) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if path.is_dir():
            return  # some platforms cannot open directories; their renames are still atomic
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not path.is_dir():
            raise  # some filesystems refuse fsync on a directory (EINVAL): nothing to do
    finally:
        os.close(fd)


def _rename(src: Path, dst: Path) -> None:
    """os.rename, isolated so tests can interrupt the swap between its two renames."""
    os.rename(src, dst)


def _move_into_place(tmp: Path, target: Path, force: bool, marker: str) -> None:
    """Publish tmp at target. With an existing target: move it aside, move tmp in, then delete
    it; if the second rename fails the old directory is moved back."""
    if not os.path.lexists(target):
        try:
            _rename(tmp, target)
        except OSError:
            if os.path.lexists(target):  # appeared since the first check
                raise UsageError(f"{target} exists; pass --force to overwrite") from None
            raise
        _fsync(target.parent)
        return
    refuse_existing(target, force, marker)
    old = _sibling(target, "old")
    _rename(target, old)
    try:
        _rename(tmp, target)
    except BaseException:
        _rename(old, target)
        raise
    _fsync(target.parent)
    _remove(old)


def _remove(path: Path) -> None:
    """Best-effort removal of something this process created."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
