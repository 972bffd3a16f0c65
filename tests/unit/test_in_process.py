"""The unit kind stays the fast loop: starting a process from a unit test fails, naming where the
test belongs (tests/unit/conftest.py)."""

import os
import subprocess

import pytest


def test_a_unit_test_that_starts_a_process_fails_and_says_where_it_goes():
    with pytest.raises(AssertionError, match="move it to tests/integration/"):
        subprocess.run(["true"], check=False)


def test_a_unit_test_that_forks_fails_too():
    with pytest.raises(AssertionError, match="tests/integration/"):
        os.fork()
