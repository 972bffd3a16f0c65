"""`golden minimize` end to end on the embedded engine: real servers on loopback, real zarr files.

A small scenario is recorded in the test on the reference profile; the engine then serves it on
`hicache` with a fault (`overreport-cached`: every reported hit counts the whole prompt), and the
minimizer must find a repro that still fails against the faulty server, passes against the same
profile without the fault, is 1-minimal (checked here by replaying every one-smaller variant),
and is much smaller than the start. The other tests each exercise one option of the command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.server.transport import ClientOptions
from replay.engine.config import get_config
from replay.engine.model import HybridModel
from replay.engine.options import profile_options
from replay.engine.server import start_server
from replay.golden.model import subset_golden
from replay.golden.store import read_golden, verify_golden, write_golden
from replay.jobs.minimize.session import Failure
from replay.golden.scenario import ScenarioSpec, build_plan
from replay.jobs.session import ServerTarget, record_in_memory, replay_golden
from replay.golden.tree import with_ancestors
from tests.support import paths

ROOT = paths.REPO
# 2 groups x 2 branches x 2 turns: 8 requests; the second branch of a group hits the group's
# 128-token prefix, every turn 1 hits its parent's history.
SMALL = ScenarioSpec(name="minimize-small", groups=2, branches=2, prefix_len=128, suffix_len=16,
                     turns=1, turn_suffix_len=16, max_new_tokens=16, top_k=3)
FAULT = "overreport-cached"
runner = CliRunner()


@pytest.fixture(scope="module")
def model() -> HybridModel:
    return HybridModel(get_config("tiny"), 0, "cpu")


@pytest.fixture(scope="module")
def golden(model, tmp_path_factory) -> Path:
    with start_server(profile_options("reference"), model=model) as server:
        recorded = record_in_memory(build_plan(SMALL), ServerTarget(url=server.url),
                                    api="sglang")
    return write_golden(recorded, tmp_path_factory.mktemp("g") / "small.zarr")


@pytest.fixture(scope="module")
def faulty(model):
    with start_server(profile_options("hicache", fault=FAULT), model=model) as server:
        yield server.url


@pytest.fixture(scope="module")
def clean(model):
    with start_server(profile_options("hicache"), model=model) as server:
        yield server.url


def minimize(golden: Path, out: Path, *args: str):
    res = runner.invoke(app, ["minimize", str(golden), "--out", str(out), "--api", "sglang",
                              "-q", *args])
    doc = json.loads((out / "minimize.json").read_text()) if (out / "minimize.json").exists() \
        else None
    return res, doc


def repro(out: Path, *args: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GOLDEN": f"{sys.executable} -m cli"}
    return subprocess.run(["sh", str(out / "repro.sh"), *args, "-q"], env=env,
                          capture_output=True, timeout=300).returncode


@pytest.fixture(scope="module")
def minimized(golden, faulty, tmp_path_factory):
    out = tmp_path_factory.mktemp("m") / "repro"
    res, doc = minimize(golden, out, "--server", faulty)
    assert res.exit_code == 0, res.output
    return out, doc


def test_the_repro_fails_with_the_fault_and_passes_without_it(minimized, faulty, clean):
    out, doc = minimized
    assert doc["failure"]["class"] == "over_reported"
    assert repro(out) == 1  # default: the server it was minimized against
    assert repro(out, clean) == 0


def test_the_repro_is_a_valid_much_smaller_golden(minimized, golden):
    out, doc = minimized
    assert verify_golden(out / "golden.zarr") == []
    sub = read_golden(out / "golden.zarr")
    assert len(sub.requests) == doc["result"]["requests"] == 2 < len(read_golden(golden).requests)
    assert [r.id for r in sub.requests] == doc["result"]["request_ids"]
    assert doc["one_minimal"] and doc["verdict"] == "1-minimal"
    assert (doc["result"]["schedule"], doc["result"]["concurrency"]) == ("lockstep", 1)
    # + the first replay and the final rerun of the result
    assert sum(s["replays"] for s in doc["steps"]) + 2 == doc["replays"]
    assert doc["reproduced"] and doc["rerun"]["fails"]


def test_the_repro_is_one_minimal_against_the_faulty_server(minimized, golden, faulty):
    out, doc = minimized
    whole = read_golden(golden)
    kept = [whole.index(i) for i in doc["result"]["request_ids"]]
    failure = Failure(doc["failure"]["class"])
    convs: dict[tuple[int, int], list[int]] = {}
    for i in kept:
        convs.setdefault((whole.requests[i].group, whole.requests[i].branch), []).append(i)
    for conv in convs.values():
        for gone in {tuple(conv), tuple(conv[-1:])}:
            rest = with_ancestors(whole.requests, [i for i in kept if i not in gone])
            if not rest:
                continue
            report = replay_golden(subset_golden(whole, rest), ServerTarget(url=faulty),
                                   client=ClientOptions(concurrency=1), api="sglang")
            assert report["verdict"] != "error", report["error"]
            assert not failure.matching(report), f"still fails without {gone}"


def test_a_server_without_the_fault_is_refused_with_exit_2(golden, clean, tmp_path):
    res, doc = minimize(golden, tmp_path / "out", "--server", clean)
    assert res.exit_code == 2 and doc is None
    assert "passed: there is no failure to minimize" in res.output


def test_report_names_the_failure_and_saves_the_first_replay(golden, faulty, tmp_path):
    report = tmp_path / "failing.json"
    runner.invoke(app, ["replay", str(golden), "--server", faulty, "--report", str(report), "-q"])
    res, doc = minimize(golden, tmp_path / "out", "--server", faulty, "--report", str(report))
    assert res.exit_code == 0, res.output
    assert sum(s["replays"] for s in doc["steps"]) + 1 == doc["replays"]  # + the final rerun


def test_a_failure_class_the_start_does_not_show_is_refused(golden, faulty, tmp_path):
    res, _ = minimize(golden, tmp_path / "out", "--server", faulty, "--failure", "logprob_drift")
    assert res.exit_code == 2 and "shows no logprob_drift failure" in res.output


def test_repeat_judges_by_n_repeats_and_keeps_one_when_every_repeat_failed(golden, faulty,
                                                                           tmp_path):
    res, doc = minimize(golden, tmp_path / "out", "--server", faulty, "--repeat", "2")
    assert res.exit_code == 0, res.output
    assert doc["start"]["repeat"] == 2 and doc["result"]["repeat"] == 1
    assert not doc["result"]["flaky"]


def test_budget_stops_early_and_says_the_result_may_not_be_minimal(golden, faulty, tmp_path):
    res, doc = minimize(golden, tmp_path / "out", "--server", faulty, "--budget", "3runs")
    assert res.exit_code == 0, res.output
    assert doc["budget_exhausted"] and not doc["one_minimal"]
    assert doc["replays"] == 5  # the first replay, 3 in the search, the final rerun
    assert verify_golden(tmp_path / "out" / "golden.zarr") == []


def test_schedule_and_concurrency_are_reduced_from_where_they_start(golden, faulty, tmp_path):
    res, doc = minimize(golden, tmp_path / "out", "--server", faulty, "--schedule", "dag",
                        "--concurrency", "4")
    assert res.exit_code == 0, res.output
    assert (doc["start"]["schedule"], doc["start"]["concurrency"]) == ("dag", 4)
    assert (doc["result"]["schedule"], doc["result"]["concurrency"]) == ("lockstep", 1)


def test_a_non_empty_out_dir_needs_force(golden, faulty, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    res, _ = minimize(golden, tmp_path / "out", "--server", faulty)
    assert res.exit_code == 2 and "--force" in res.output


def test_launch_starts_the_faulty_profile_once_and_the_repro_launches_it_again(golden, tmp_path,
                                                                               monkeypatch):
    import replay.server.launch

    launches = []
    real = replay.server.launch.launched

    def counting(profile, **kwargs):
        launches.append(profile.name)
        return real(profile, **kwargs)

    monkeypatch.setattr(replay.server.launch, "launched", counting)
    out = tmp_path / "out"
    res, doc = minimize(golden, out, "--launch", "embedded-hicache", "--fault", FAULT,
                        "--log-dir", str(tmp_path / "logs"))
    assert res.exit_code == 0, res.output
    assert doc["server"] == "launch:embedded-hicache"
    assert launches == ["embedded-hicache"]  # one server for the whole search
    assert "--launch embedded-hicache --fault overreport-cached" in (out / "repro.sh").read_text()
    assert repro(out, "--log-dir", str(tmp_path / "logs")) == 1


def test_the_repro_header_counts_the_failing_requests_apart_from_the_rest(minimized):
    out, doc = minimized
    header = (out / "repro.sh").read_text().splitlines()[2]
    failing = len(doc["result"]["failing"])
    assert header.startswith(f"# Reruns the minimized replay (over_reported) of "
                             f"{doc['result']['requests']} request(s): {failing} failing request")
