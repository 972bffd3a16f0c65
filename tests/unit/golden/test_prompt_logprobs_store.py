"""Goldens with prompt logprobs: an optional array and attribute, exact round trips in the
current layout, goldens without them unchanged, and a contradiction refused."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from replay.golden.codec import encode
from replay.golden.store import read_golden, verify_golden, write_golden
from replay.utils.errors import GoldenFormatError
from tests.unit.golden.test_store import bits, f32_values, make_golden


def with_prompt(golden, counts=(5, 0, 7)):
    reqs = []
    for r, n in zip(golden.requests, counts):
        reqs.append(replace(r, prompt_logprob_start=2 if n else -1,
                            prompt_logprobs=f32_values(n, seed=90 + n) if n else None))
    return replace(golden, requests=reqs)


def test_prompt_logprobs_round_trip_bit_exact(tmp_path):
    golden = with_prompt(make_golden())
    back = read_golden(write_golden(golden, tmp_path / "g.zarr"))
    for r, s in zip(golden.requests, back.requests):
        assert s.prompt_logprob_start == r.prompt_logprob_start
        assert (s.prompt_logprobs is None) == (r.prompt_logprobs is None)
        if r.prompt_logprobs is not None:
            assert np.array_equal(bits(r.prompt_logprobs), bits(s.prompt_logprobs))
    assert verify_golden(tmp_path / "g.zarr") == []


def test_a_golden_without_prompt_logprobs_stores_neither_array_nor_attribute():
    arrays, attrs = encode(make_golden())
    assert "prompt_logprobs" not in arrays and "prompt_logprobs" not in attrs


def test_counts_that_disagree_with_the_array_are_refused(tmp_path):
    path = write_golden(with_prompt(make_golden()), tmp_path / "g.zarr")
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["prompt_logprobs"]["counts"][0] = 6
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(GoldenFormatError):
        read_golden(path, verify=False)


def test_prompt_logprobs_without_a_start_cannot_be_written(tmp_path):
    golden = make_golden()
    bad = replace(golden, requests=[replace(golden.requests[0], prompt_logprobs=f32_values(3)),
                                    *golden.requests[1:]])
    with pytest.raises(GoldenFormatError, match="prompt_logprobs"):
        write_golden(bad, tmp_path / "g.zarr")
