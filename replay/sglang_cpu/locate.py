"""Where the CPU test server's environment lives: its own venv, made by
scripts/install_sglang_cpu.sh (sglang 0.5.23 on the CPU torch, plus the sgl-kernel CPU extension
built from the vendored source). Nothing here imports SGLang."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

VENV_ENV = "GOLDEN_SGLANG_CPU_VENV"
INSTALL_SCRIPT = "scripts/install_sglang_cpu.sh"


def default_venv() -> Path:
    return Path(os.environ.get(VENV_ENV) or Path.home() / ".cache/golden-replay/sglang-cpu-venv")


def has_server_packages() -> bool:
    """This interpreter can run the real server: sglang and the sgl_kernel CPU extension."""
    return all(importlib.util.find_spec(m) is not None for m in ("sglang", "sgl_kernel"))


def cpu_python() -> str | None:
    """The CPU venv's interpreter, else this one if it has the packages, else None."""
    venv_python = default_venv() / "bin" / "python"
    if venv_python.exists():
        return str(venv_python)
    return sys.executable if has_server_packages() else None


def install_hint() -> str:
    return (f"SGLang's CPU server environment is missing: run `bash {INSTALL_SCRIPT}` "
            f"(a venv in {default_venv()}; {VENV_ENV} overrides)")
