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
