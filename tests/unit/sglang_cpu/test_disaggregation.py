"""The PD transfer fault of replay/sglang_cpu/disaggregation.py, without SGLang (its binding to
SGLang's own modules is checked in tests/e2e/pd/test_patches.py)."""

from __future__ import annotations

import numpy as np
import pytest

from replay.sglang_cpu import disaggregation


def test_the_wrong_page_offset_fault_sends_a_chunks_last_page_from_the_page_before():
    pages = np.array([7, 3, 9], dtype=np.int32)
    assert disaggregation.wrong_page_offset(pages).tolist() == [7, 3, 3]
    assert pages.tolist() == [7, 3, 9]  # the scheduler's own indices are left alone


def test_a_one_page_chunk_is_sent_as_it_is():
    pages = np.array([4], dtype=np.int32)
    assert disaggregation.wrong_page_offset(pages) is pages


def test_an_unknown_fault_is_refused():
    with pytest.raises(RuntimeError, match="not a transfer fault"):
        disaggregation.arm_transfer_fault("flip-bits")
