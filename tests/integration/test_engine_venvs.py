"""The engine installers (scripts/install_sglang.sh, install_sglang_cpu.sh, install_vllm.sh) run
from inside a virtualenv, how most people install a Python tool: each engine's venv sees the
packages of the venv golden-replay was installed into, not only the base interpreter's (made from
a venv, `--system-site-packages` alone gives the base's: SGLang's import then died on `No module
named 'aiohttp'`, and `python -m replay.sglang_cpu` found no golden-replay), and each "already
installed" stamp notices when that venv changes.

The user venv is made on top of the environment running the tests: a venv of the base interpreter
with a .pth that adds the running environment's site directories (scripts/user_env.py pth, the
installers' own mechanism), so torch is found wherever the suite runs: in the base interpreter, as
on the dev machine, or in a venv made with a Python that has no torch, as on a fresh machine
(`--system-site-packages` alone gives the base's packages, never the running venv's). It holds
two packages nobody else has: one installed plainly, one as an editable install does it (a
.pth file pointing at a source folder). Each script makes its venv with `--link-only` (the venv
and its view of the user environment, shared code in scripts/linked_venv.sh: seconds); the pip
installs a full run adds on top are what scripts/test.sh runs, and the whole suite then runs on
the venvs they make (docs/benchmarks.md has whole runs from nothing in a virtualenv).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import paths

PROBE = "import golden_probe_plain, golden_probe_editable; print('user venv visible')"


@dataclass(frozen=True)
class Installer:
    script: str
    venv_variable: str
    stamp_file: str


INSTALLERS = [
    Installer("install_sglang.sh", "GOLDEN_SGLANG_VENV", ".golden-sglang-installed"),
    Installer("install_sglang_cpu.sh", "GOLDEN_SGLANG_CPU_VENV", ".golden-sglang-cpu-installed"),
    Installer("install_vllm.sh", "GOLDEN_VLLM_VENV", ".golden-vllm-installed"),
]


def base_python() -> str:
    return getattr(sys, "_base_executable", sys.executable)


RUNNING_ENV_PTH = "00-golden-test-running-env.pth"


def running_env_pth() -> str:
    """The .pth lines that let another interpreter see the environment running the tests."""
    return subprocess.run([sys.executable, str(paths.REPO / "scripts" / "user_env.py"), "pth"],
                          check=True, capture_output=True, text=True).stdout


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def add_distribution(site: Path, name: str, version: str = "1.0") -> None:
    """What pip leaves for a plain install: the module and its dist-info."""
    (site / f"{name}.py").write_text("")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def install(installer: Installer, user_python: Path, engine_venv: Path,
            *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": str(user_python), installer.venv_variable: str(engine_venv)}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(["bash", str(paths.REPO / "scripts" / installer.script), *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user-venv")
    venv = root / "venv"
    subprocess.run([base_python(), "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    site = site_packages(venv)
    (site / RUNNING_ENV_PTH).write_text(running_env_pth())  # torch, wherever it is installed
    add_distribution(site, "golden_probe_plain")
    source = root / "src"
    source.mkdir()
    (source / "golden_probe_editable.py").write_text("")
    (site / "__editable__.golden_probe_editable-1.0.pth").write_text(f"{source}\n")
    return venv


@pytest.fixture(scope="module", params=INSTALLERS, ids=lambda i: i.script)
def installer(request) -> Installer:
    return request.param


@pytest.fixture(scope="module")
def linked(installer, user_venv, tmp_path_factory) -> Path:
    engine_venv = tmp_path_factory.mktemp("engine") / "venv"
    result = install(installer, user_venv / "bin" / "python", engine_venv, "--link-only")
    assert result.returncode == 0, result.stdout + result.stderr
    return engine_venv


def run_in(venv: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                          text=True)


def test_the_engine_venv_sees_the_user_venvs_packages_and_editable_installs(linked):
    probe = run_in(linked, PROBE)
    assert probe.stdout.strip() == "user venv visible", probe.stderr


def test_the_user_venv_sees_the_running_environments_torch(user_venv):
    """What the installers check first (`torch is not installed in ...`): true on a fresh machine."""
    probe = run_in(user_venv, "import torch; print(torch.__version__)")
    assert probe.returncode == 0, probe.stderr


def test_the_engine_venv_sees_the_user_environments_torch(linked):
    probe = run_in(linked, "import torch; print(torch.__version__)")
    assert probe.returncode == 0, probe.stderr


def test_the_engine_venvs_own_site_packages_come_before_the_user_venvs(linked, user_venv):
    """What the engine's venv installs (transformers 5.x) shadows the user environment's copy."""
    probe = run_in(linked, "import sys, sysconfig; print(sys.path.index(sysconfig.get_paths()"
                           f"['purelib']) < sys.path.index({str(site_packages(user_venv))!r}))")
    assert probe.stdout.strip() == "True", probe.stderr


def test_the_stamp_names_the_user_venv(installer, user_venv, tmp_path):
    wanted = install(installer, user_venv / "bin" / "python", tmp_path / "unused", "--stamp")
    assert wanted.returncode == 0, wanted.stderr
    assert f"env={user_venv} " in wanted.stdout


def test_bytecode_beside_the_cpu_installers_scripts_leaves_its_stamp_as_it_was(user_venv, tmp_path):
    """Python writes __pycache__ next to scripts/sglang_cpu/*.py wherever PYTHONDONTWRITEBYTECODE
    is unset (a test importing one is enough): the stamp hashes the files, never that folder."""
    cpu = next(i for i in INSTALLERS if i.script == "install_sglang_cpu.sh")
    python = user_venv / "bin" / "python"
    cache = paths.REPO / "scripts" / "sglang_cpu" / "__pycache__"
    made = not cache.exists()
    try:
        cache.mkdir(exist_ok=True)
        (cache / "golden_probe.cpython-311.pyc").write_bytes(b"")
        with_bytecode = install(cpu, python, tmp_path / "unused", "--stamp")
        (cache / "golden_probe.cpython-311.pyc").unlink()
        if made:
            cache.rmdir()
        without = install(cpu, python, tmp_path / "unused", "--stamp")
    finally:
        (cache / "golden_probe.cpython-311.pyc").unlink(missing_ok=True)
        if made and cache.exists():
            cache.rmdir()
    assert with_bytecode.returncode == 0, with_bytecode.stderr
    assert with_bytecode.stdout == without.stdout


def test_a_change_in_the_user_venv_changes_the_stamp(installer, user_venv, tmp_path):
    """The "already installed" check compares this stamp with the one the install recorded."""
    python = user_venv / "bin" / "python"
    before = install(installer, python, tmp_path / "unused", "--stamp").stdout
    later = "golden_probe_later_" + installer.script.removesuffix(".sh")  # one per installer
    add_distribution(site_packages(user_venv), later, "2.0")
    after = install(installer, python, tmp_path / "unused", "--stamp").stdout
    assert before and after and before != after


def test_a_recorded_stamp_that_matches_is_already_installed(installer, linked, user_venv):
    stamp = install(installer, user_venv / "bin" / "python", linked, "--stamp").stdout
    (linked / installer.stamp_file).write_text(stamp)
    again = install(installer, user_venv / "bin" / "python", linked)
    assert again.returncode == 0 and "already installed" in again.stdout
