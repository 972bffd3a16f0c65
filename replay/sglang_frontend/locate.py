"""Where SGLang lives: its own virtual environment, made by scripts/install_sglang.sh.

SGLang 0.5.23 needs transformers 5.x while the rest of the project (llama.cpp's converter) pins
4.57.6, so SGLang gets a venv of its own that sees the system's packages (the CPU torch among them)
and shadows only what it must. Nothing here imports SGLang.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

PYTHON_ENV = "GOLDEN_SGLANG_PYTHON"  # an interpreter that imports sglang (overrides the venv)
VENV_ENV = "GOLDEN_SGLANG_VENV"


def default_venv() -> Path:
    return Path(os.environ.get(VENV_ENV) or Path.home() / ".cache/golden-replay/sglang-venv")


STAMP = ".golden-sglang-installed"  # written by install_sglang.sh once its import check passed
INSTALL = "bash scripts/install_sglang.sh"


def sglang_python() -> str | None:
    """An interpreter with SGLang installed, or None: GOLDEN_SGLANG_PYTHON, else the venv of
    install_sglang.sh once its install completed, else this interpreter if it imports sglang.
    A venv named by GOLDEN_SGLANG_VENV is never replaced by another interpreter: if it is not
    complete, there is none (and `install_hint` says so)."""
    given = os.environ.get(PYTHON_ENV)
    if given:
        return given
    venv_python = default_venv() / "bin" / "python"
    if venv_python.exists() and (default_venv() / STAMP).exists():
        return str(venv_python)
    if os.environ.get(VENV_ENV):
        return None
    if importlib.util.find_spec("sglang") is not None:
        return sys.executable
    return None


def named_venv_elsewhere() -> bool:
    """GOLDEN_SGLANG_VENV names a venv that is not the one this interpreter runs in: that venv
    is the one to use (even if this interpreter also imports sglang)."""
    named = os.environ.get(VENV_ENV)
    return bool(named) and Path(sys.prefix).resolve() != Path(named).resolve()


def install_hint() -> str:
    if (default_venv() / "bin" / "python").exists():
        return (f"SGLang's venv in {default_venv()} is incomplete (its install never finished): "
                f"run `{INSTALL}`")
    return (f"SGLang is not installed: run `{INSTALL}` (a venv in {default_venv()}), or set "
            f"{PYTHON_ENV} to a Python that imports sglang 0.5.23")


def rebuild_hint(exc: ImportError) -> str:
    """SGLang is there but its server cannot be imported: the environment is broken or stale."""
    return (f"SGLang's environment ({sys.executable}) cannot import its server ({exc}): run "
            f"`{INSTALL}` again from the environment golden-replay is installed in")
