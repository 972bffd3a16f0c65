"""The installed `golden` as another interpreter sees it (its in-process checks:
tests/unit/test_packaging.py)."""

import subprocess
import sys

from tests.support import paths


def test_the_cli_an_interpreter_imports_from_elsewhere_is_this_repositorys():
    """Started outside the repository (no working directory on sys.path), `import cli` still
    finds this cli/ folder: no other distribution's top-level `cli` shadows it."""
    done = subprocess.run([sys.executable, "-c", "import cli; print(cli.__file__)"],
                          capture_output=True, text=True, cwd="/", check=True)
    assert done.stdout.strip() == str(paths.REPO / "cli" / "__init__.py")


HEAVY = ("numpy", "zarr", "aiohttp", "torch", "rich", "sqlalchemy")


def test_golden_help_imports_none_of_the_heavy_libraries():
    """The CLI starts in a blink (docs/architecture.md): the commands import the library inside
    their bodies, so asking for help loads no numpy, zarr, aiohttp, torch or rich."""
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom cli.main import app\n"
            "assert CliRunner().invoke(app, ['replay', '--help']).exit_code == 0\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=paths.REPO, check=True)
    assert done.stdout.strip() == "[]"
