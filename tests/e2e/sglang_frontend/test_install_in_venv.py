"""scripts/install_sglang.sh run from inside a virtualenv (how most people install a Python tool):
SGLang's venv sees the packages of the venv golden-replay was installed into, not only the base
interpreter's, and its "already installed" stamp notices when that venv changes.

The user venv is made with --system-site-packages (so torch is the base's, as on this machine) and
holds two packages nobody else has: one installed plainly, one as an editable install does it (a
.pth file pointing at a source folder). The install goes into a fresh temp venv and fetches what
pip's cache and index give (about 2-4 minutes on 2 busy cores; docs/benchmarks.md).
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
def installed(user_venv, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    sglang_venv = tmp_path_factory.mktemp("sglang") / "venv"
    result = install(user_venv / "bin" / "python", sglang_venv)
    assert result.returncode == 0, result.stdout + result.stderr
    return sglang_venv, result


def test_sglangs_venv_sees_the_user_venvs_packages_and_editable_installs(installed):
    sglang_venv, _ = installed
    probe = subprocess.run([str(sglang_venv / "bin" / "python"), "-c", PROBE],
                           capture_output=True, text=True)
    assert probe.stdout.strip() == "user venv visible", probe.stderr


def test_sglangs_own_packages_come_before_the_user_venvs(installed):
    """transformers 5.x of SGLang's venv wins over whatever the user environment holds."""
    sglang_venv, _ = installed
    version = subprocess.run([str(sglang_venv / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('transformers'))"],
                             capture_output=True, text=True)
    assert version.stdout.strip() == "5.19.0", version.stderr


def test_a_second_run_finds_it_installed(installed, user_venv):
    sglang_venv, _ = installed
    again = install(user_venv / "bin" / "python", sglang_venv)
    assert again.returncode == 0
    assert "already installed" in again.stdout


def test_a_change_in_the_user_venv_makes_the_stamp_stale(installed, user_venv):
    sglang_venv, _ = installed
    recorded = (sglang_venv / ".golden-sglang-installed").read_text().strip()
    add_distribution(site_packages(user_venv), "golden_probe_later", "2.0")
    wanted = install(user_venv / "bin" / "python", sglang_venv, "--stamp")
    assert wanted.returncode == 0
    assert wanted.stdout.strip() != recorded
    assert f"env={user_venv}" in wanted.stdout
