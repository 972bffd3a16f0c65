"""repro.sh's words in-process (replay/jobs/minimize/repro_script.py); the scripts run by a real
`sh`, hostile strings and secrets included: tests/integration/test_repro_sh.py."""

from __future__ import annotations

import pytest

from replay.jobs.minimize.repro_script import Secret


def test_a_secret_env_name_must_be_a_variable_name():
    with pytest.raises(ValueError):
        Secret("x", "A; rm -rf /", "bad")


def test_the_header_counts_failing_ancestor_and_pressure_requests_apart():
    from types import SimpleNamespace as R

    from replay.jobs.minimize.session import kept_words

    # g0/t0 -> g0/t1 (fails); 10 unrelated turn-0 requests kept only to evict the cache
    requests = [R(id="g0/b0/t0", parent=-1), R(id="g0/b0/t1", parent=0),
                *(R(id=f"g{i}/b0/t0", parent=-1) for i in range(1, 11))]
    keep = list(range(12))
    assert kept_words(requests, keep, ["g0/b0/t1"]) == (
        "1 failing request, 1 ancestor (the history it follows), 10 pressure requests (kept to evict the cache)")
    assert kept_words(requests, keep[2:], ["g1/b0/t0"]) == \
        "1 failing request, 9 pressure requests (kept to evict the cache)"
    assert kept_words(requests, [0, 1], ["g0/b0/t0", "g0/b0/t1"]) == "2 failing requests"
