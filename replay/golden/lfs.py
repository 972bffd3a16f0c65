"""A golden checked out without its Git LFS data: its chunk files are LFS pointer texts.

A repository that tracks goldens with Git LFS and a checkout that skipped `git lfs pull` (a CI
job without `lfs: true`) leaves, in place of each chunk, a small text file naming the real one.
Read as data it fails deep in a codec ("blosc header says 544108393 bytes..."), which sends a
developer looking for corruption. It is recognised first, by the pointer's fixed first line,
and named for what it is, with the one command that fixes it.
"""

from __future__ import annotations

from pathlib import Path

from replay.utils.errors import GoldenFormatError

POINTER_START = b"version https://git-lfs.github.com/spec/v1"


class LfsPointers(GoldenFormatError):
    """The golden's files are Git LFS pointers, not data: a checkout step is missing (not a
    corrupt golden whose problems are listed)."""


def is_lfs_pointer(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(POINTER_START)) == POINTER_START
    except OSError:
        return False


def refuse_lfs_pointers(golden: Path) -> None:
    """LfsPointers when any file of the golden (at `golden`, a directory) is an LFS pointer."""
    if any(p.is_file() and not p.is_symlink() and is_lfs_pointer(p) for p in golden.rglob("*")):
        raise LfsPointers(f"{golden}'s chunks are Git LFS pointers, not data: run git lfs pull")
