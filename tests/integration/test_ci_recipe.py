"""The CI recipe of docs/ci.md runs as written: its embedded shard jobs and their merge job,
read from the documented YAML and run on the embedded engine, with the exit codes a CI sees."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import paths
from tests.support.console import joined_commands

DOC = paths.REPO / "docs" / "ci.md"


def workflow() -> dict:
    [block] = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    return yaml.safe_load(block)


def golden_steps(job: dict) -> list[str]:
    """The job's `run:` steps that call golden (installing and checking out are CI's part)."""
    return [s["run"].strip() for s in job["steps"] if "run" in s and s["run"].startswith("golden ")]


def sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def shard_artifacts(tmp_path_factory) -> Path:
    """Each documented shard job run in its own directory, its files kept as CI keeps its
    artifact (one directory per job, named as the YAML names it)."""
    jobs = workflow()["jobs"]
    job = jobs["embedded"]
    [command] = golden_steps(job)
    root = tmp_path_factory.mktemp("ci")
    for index, shard in enumerate(job["strategy"]["matrix"]["shard"]):
        work = root / f"job-{index}"
        work.mkdir()
        (work / "goldens").symlink_to(paths.GOLDENS)
        res = sh(command.replace("${{ matrix.shard }}", shard), work)
        assert res.returncode == 0, res.stdout + res.stderr  # each shard job is green
        artifact = root / "artifacts" / f"embedded-shard-{index}"
        artifact.mkdir(parents=True)
        for name in ("matrix.json", "junit.xml"):
            shutil.copy(work / name, artifact / name)
    return root / "artifacts"


def merge_command() -> str:
    job = workflow()["jobs"]["embedded-merge"]
    assert job["needs"] == "embedded" and job["if"] == "always()"
    [command] = golden_steps(job)
    return command


def test_the_documented_recipe_has_a_merge_job_after_every_shard_job():
    jobs = workflow()["jobs"]
    assert "golden report --merge" in merge_command()
    assert jobs["sglang-merge"]["needs"] == "sglang"
    assert [c for c in golden_steps(jobs["sglang-merge"]) if c.startswith("golden report --merge")]


def test_sharded_jobs_with_require_tier_host_pass_and_merge_to_a_pass(shard_artifacts):
    res = sh(merge_command(), shard_artifacts)
    assert res.returncode == 0, res.stdout + res.stderr
    merged = json.loads((shard_artifacts / "merged.json").read_text())
    assert merged["verdict"] == "pass"
    for report in merged["matrix"]["reports"].values():
        assert report["summary"]["requests"] == 27  # the whole golden, every request once
        assert report["summary"]["cached_tokens_by_tier"].get("host", 0) > 0
        assert report["tier_problem"] is None
    xml = (shard_artifacts / "merged.xml").read_text()
    assert xml.count("<testcase") == 27 * len(merged["matrix"]["profiles"])
    assert (shard_artifacts / "merged.html").read_text().startswith("<!DOCTYPE html>")


def test_a_merge_missing_a_shard_job_exits_2(shard_artifacts, tmp_path):
    shutil.copytree(shard_artifacts / "embedded-shard-0", tmp_path / "embedded-shard-0")
    res = sh(merge_command(), tmp_path)
    assert res.returncode == 2
    assert "2/2 missing" in res.stderr and "Traceback" not in res.stderr


def test_a_failing_request_in_a_shard_makes_the_merge_exit_1(shard_artifacts, tmp_path):
    for artifact in shard_artifacts.glob("embedded-shard-*"):
        shutil.copytree(artifact, tmp_path / artifact.name)
    path = tmp_path / "embedded-shard-1" / "matrix.json"
    doc = json.loads(path.read_text())
    report = copy.deepcopy(doc["matrix"]["reports"]["embedded-hicache"])
    report["requests"][0]["passed"] = False  # the shard still says pass
    doc["matrix"]["reports"]["embedded-hicache"] = report
    path.write_text(json.dumps(doc))
    res = sh(merge_command(), tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["matrix"]["verdicts"]["embedded-hicache"] == "fail"
    [rerun] = joined_commands(res.stdout, "rerun embedded-hicache: ")
    assert rerun.startswith("rerun embedded-hicache: golden replay ")
    assert rerun.endswith("--shard 2/2")


def install_steps(job: dict) -> list[str]:
    return [s["run"].strip() for s in job["steps"] if "run" in s and s["run"].startswith("pip ")]


def test_a_hosted_job_that_needs_the_engine_installs_the_pinned_cpu_torch_first():
    """A hosted runner has no torch: unpinned, pip fetches a multi-GB CUDA build, and a torch
    that floats drifts from the committed goldens."""
    jobs = [job for job in workflow()["jobs"].values() if job["runs-on"] == "ubuntu-latest"
            and any("engine" in step for step in install_steps(job))]
    assert jobs
    for job in jobs:
        steps = install_steps(job)
        engine = next(i for i, step in enumerate(steps) if "engine" in step)
        torch = [step for step in steps[:engine] if "torch" in step]
        assert torch == ["pip install torch==2.13.0 --index-url "
                         "https://download.pytorch.org/whl/cpu"], steps


def test_every_golden_a_job_replays_is_one_the_recipe_records():
    recorded = set(re.findall(r"--out (\S+\.zarr)", DOC.read_text().split("## 2.")[0]))
    replayed = {step.split()[2] for job in workflow()["jobs"].values()
                for step in golden_steps(job) if step.split()[1] in ("matrix", "replay")}
    assert replayed and replayed <= recorded, (replayed, recorded)
    assert all((paths.REPO / golden).is_dir() for golden in replayed if "h200" not in golden)


def test_no_long_job_silences_its_progress_lines():
    """A CI log shows a long job's progress as plain lines (docs/ci.md): `-q` would hide them."""
    for job in workflow()["jobs"].values():
        for step in golden_steps(job):
            if step.split()[1] in ("matrix", "replay", "record", "update"):
                assert not {"-q", "--quiet"} & set(step.split()), step
