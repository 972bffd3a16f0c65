"""scripts/install_sglang.sh run from inside a virtualenv (how most people install a Python tool):
SGLang's venv sees the packages of the venv golden-replay was installed into, not only the base
interpreter's, and its "already installed" stamp notices when that venv changes.

The user venv is made with --system-site-packages (so torch is the base's, as on this machine) and
holds two packages nobody else has: one installed plainly, one as an editable install does it (a
.pth file pointing at a source folder). The script makes SGLang's venv with `--link-only` (the
venv and its view of the user environment: seconds); the pip installs that a full run adds on top
took 313 s on 2 busy cores (docs/benchmarks.md), and scripts/test.sh runs the whole suite on the
venv the full run makes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths

SCRIPT = paths.REPO / "scripts" / "install_sglang.sh"
PROBE = "import golden_probe_plain, golden_probe_editable; print('user venv visible')"


def base_python() -> str:
    return getattr(sys, "_base_executable", sys.executable)


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def add_distribution(site: Path, name: str, version: str = "1.0") -> None:
    """What pip leaves for a plain install: the module and its dist-info."""
    (site / f"{name}.py").write_text("")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def install(user_python: Path, sglang_venv: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": str(user_python), "GOLDEN_SGLANG_VENV": str(sglang_venv)}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=1200)


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user-venv")
    venv = root / "venv"
    subprocess.run([base_python(), "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    site = site_packages(venv)
    add_distribution(site, "golden_probe_plain")
    source = root / "src"
    source.mkdir()
    (source / "golden_probe_editable.py").write_text("")
    (site / "__editable__.golden_probe_editable-1.0.pth").write_text(f"{source}\n")
    return venv


@pytest.fixture(scope="module")
def linked(user_venv, tmp_path_factory) -> Path:
    sglang_venv = tmp_path_factory.mktemp("sglang") / "venv"
    result = install(user_venv / "bin" / "python", sglang_venv, "--link-only")
    assert result.returncode == 0, result.stdout + result.stderr
    return sglang_venv


def run_in(venv: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                          text=True)


def test_sglangs_venv_sees_the_user_venvs_packages_and_editable_installs(linked):
    probe = run_in(linked, PROBE)
    assert probe.stdout.strip() == "user venv visible", probe.stderr


def test_sglangs_venv_sees_the_base_interpreters_torch(linked):
    probe = run_in(linked, "import torch; print(torch.__version__)")
    assert probe.returncode == 0, probe.stderr


def test_sglangs_own_site_packages_come_before_the_user_venvs(linked, user_venv):
    """What SGLang's venv installs (transformers 5.x) shadows the user environment's copy."""
    probe = run_in(linked, "import sys, sysconfig; print(sys.path.index(sysconfig.get_paths()"
                           f"['purelib']) < sys.path.index({str(site_packages(user_venv))!r}))")
    assert probe.stdout.strip() == "True", probe.stderr


def test_the_stamp_names_the_user_venv(user_venv, tmp_path):
    wanted = install(user_venv / "bin" / "python", tmp_path / "unused", "--stamp")
    assert wanted.returncode == 0
    assert f"env={user_venv} " in wanted.stdout


def test_a_change_in_the_user_venv_changes_the_stamp(user_venv, tmp_path):
    """The "already installed" check compares this stamp with the one the install recorded."""
    before = install(user_venv / "bin" / "python", tmp_path / "unused", "--stamp").stdout
    add_distribution(site_packages(user_venv), "golden_probe_later", "2.0")
    after = install(user_venv / "bin" / "python", tmp_path / "unused", "--stamp").stdout
    assert before and after and before != after


def test_a_recorded_stamp_that_matches_is_already_installed(linked, user_venv):
    stamp = install(user_venv / "bin" / "python", linked, "--stamp").stdout
    (linked / ".golden-sglang-installed").write_text(stamp)
    again = install(user_venv / "bin" / "python", linked)
    assert again.returncode == 0 and "already installed" in again.stdout
