"""The suite's own grouping (tests/conftest.py): under `pytest -n 2 --dist loadgroup`, as
scripts/test.sh runs it, an e2e kind's tests stay on one worker, so a module fixture (a real
server, a recording) is made once, not once per worker."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import paths

KIND = '''
import os
import pytest


@pytest.fixture(scope="module")
def server():
    with open(os.environ["SETUPS"], "a") as log:
        log.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    yield


@pytest.mark.parametrize("i", range(8))
def test_one(server, i):
    pass
'''


def test_a_module_fixture_of_an_e2e_kind_is_made_once_on_two_workers(tmp_path: Path):
    tests = tmp_path / "tests"
    (tests / "e2e" / "kind").mkdir(parents=True)
    shutil.copy(paths.REPO / "tests" / "conftest.py", tests / "conftest.py")
    (tests / "__init__.py").touch()
    (tests / "e2e" / "kind" / "test_kind.py").write_text(KIND)
    (tests / "test_more.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(16)))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    setups = tmp_path / "setups.log"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                           "-p", "no:cacheprovider", "tests"], cwd=tmp_path, capture_output=True,
                          text=True, env={"SETUPS": str(setups), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(setups.read_text().split()) == 1
