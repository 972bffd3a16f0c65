"""Unit tests are the fast loop (`python3 -m pytest -q tests/unit` after every edit): in-process.
A unit test that starts a process fails here, naming where such a test goes instead
(tests/integration/: processes, PostgreSQL, a browser, the detection matrix; docs/architecture.md,
"Tests")."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterator

import pytest

IN_PROCESS = ("a unit test started a process ({what}): unit tests are in-process, the fast loop; "
              "move it to tests/integration/ (docs/architecture.md, \"Tests\")")


@pytest.fixture(autouse=True)
def in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    platform.processor()  # the golden fingerprint's: `uname -p` once, then cached by platform

    def refuse_popen(self: subprocess.Popen, args: object, *rest: object, **kw: object) -> None:
        raise AssertionError(IN_PROCESS.format(what=args))

    def refuse_fork() -> int:
        raise AssertionError(IN_PROCESS.format(what="os.fork"))

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_popen)
    monkeypatch.setattr(os, "fork", refuse_fork)
    yield
