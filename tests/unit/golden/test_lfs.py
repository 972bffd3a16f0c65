"""A golden checked out without `git lfs pull` is named for what it is (replay/golden/lfs.py)."""

from __future__ import annotations

import shutil

import pytest

from replay.golden.lfs import LfsPointers, refuse_lfs_pointers
from replay.golden.store import read_golden, verify_golden
from tests.support import paths

POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 9\n"


@pytest.fixture
def pointer_golden(tmp_path):
    golden = tmp_path / "g.zarr"
    shutil.copytree(paths.GOLDENS / "single.zarr", golden)
    (golden / "output_ids" / "c" / "0").write_text(POINTER)
    return golden


def test_a_golden_with_one_pointer_chunk_is_refused_as_lfs_pointers(pointer_golden):
    with pytest.raises(LfsPointers, match="chunks are Git LFS pointers, not data: run git lfs pull"):
        refuse_lfs_pointers(pointer_golden)


def test_a_committed_golden_with_its_data_passes(tmp_path):
    refuse_lfs_pointers(paths.GOLDENS / "single.zarr")


def test_reading_or_verifying_lfs_pointers_raises_instead_of_listing_a_corrupt_chunk(pointer_golden):
    with pytest.raises(LfsPointers):
        read_golden(pointer_golden)
    with pytest.raises(LfsPointers):
        verify_golden(pointer_golden)
