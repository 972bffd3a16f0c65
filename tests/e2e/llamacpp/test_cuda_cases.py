"""The GPU findings script's case definitions (scripts/llamacpp_cuda_findings.py), checked without
a GPU or a server: the runs themselves happen only on a machine with one
(scripts/h200_llamacpp.sh); CI checks that what they would run is what the findings say."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from tests.support import paths

REPO = paths.REPO
_spec = importlib.util.spec_from_file_location("llamacpp_cuda_findings", REPO / "scripts" / "llamacpp_cuda_findings.py")
cuda = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules.setdefault("llamacpp_cuda_findings", cuda)
_spec.loader.exec_module(cuda)  # type: ignore[union-attr]


def changed(a: str, b: str) -> dict[str, tuple[object, object]]:
    x, y = tomllib.loads(cuda.SCENARIOS[a]), tomllib.loads(cuda.SCENARIOS[b])
    return {k: (x[k], y[k]) for k in x if x[k] != y[k]}


def test_s24_lengthens_only_the_branch_suffix():
    assert changed("branching", "branching-s24") == {"suffix_len": (8, 24)}


def test_ts24_lengthens_only_the_follow_up_turns():
    assert changed("history", "history-ts24") == {"turn_suffix_len": (8, 24)}


def test_a_case_with_a_server_environment_records_its_own_reference():
    """run_case reuses a reference golden that exists; one recorded without the environment
    must not stand in for one recorded with it."""
    by_name = {c.name: c for c in cuda.ALL_CASES}
    plain = cuda.lf.reference_golden(by_name["llama64-branching-s24-fa-off"], Path("."))
    with_env = cuda.lf.reference_golden(by_name["llama64-branching-s24-fa-off-cublas-f32"], Path("."))
    assert plain != with_env


def test_every_case_names_a_scenario_the_script_writes():
    assert {c.scenario for c in cuda.ALL_CASES} <= set(cuda.SCENARIOS)


def test_case_names_are_unique_report_names():
    names = [c.name for c in cuda.ALL_CASES]
    assert len(names) == len(set(names))
