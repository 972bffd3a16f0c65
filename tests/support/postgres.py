"""A real, throw-away PostgreSQL server for the history tests: Debian's postgresql package
(`/usr/lib/postgresql/*/bin`), initdb into a temporary folder, started on a free loopback port
and removed afterwards. PostgreSQL refuses to run as root, so as root (CI) it runs as `nobody`.
Without the package the PostgreSQL half of the suite skips, naming the package to install
(scripts/test.sh installs it when it runs as root).
"""

from __future__ import annotations

import inspect
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import pytest

USER = "golden"  # the superuser initdb creates (trust authentication on loopback only)


def pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Postgres:
    bin: Path
    root: Path
    port: int
    _names: Iterator[int] = itertools.count()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a fresh, empty database (one per test)."""
        import psycopg

        name = f"h{os.getpid()}_{next(self._names)}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "nobody", "--", *cmd] if os.geteuid() == 0 else cmd


def start_postgres() -> Iterator[Postgres]:
    bin_dir = pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql): the history's "
                    "PostgreSQL tests did not run")
    root = Path(tempfile.mkdtemp(prefix="golden-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "nobody")
    data, port = root / "data", free_port()
    run = lambda cmd: subprocess.run(_as_server_user(cmd), capture_output=True, text=True,  # noqa: E731
                                     timeout=120, check=False)
    try:
        init = run([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", USER,
                    "--no-sync", "-E", "UTF8"])
        assert init.returncode == 0, init.stderr[-2000:]
        options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off "
                   "-c max_connections=100 -c synchronous_commit=off")
        started = run([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options,
                       "-l", str(root / "log"), "-w", "-t", "60", "start"])
        assert started.returncode == 0, started.stderr[-2000:] + _log(root)
        yield Postgres(bin=bin_dir, root=root, port=port)
    finally:
        if (data / "postmaster.pid").exists():
            run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(root, ignore_errors=True)


def _log(root: Path) -> str:
    log = root / "log"
    return log.read_text(errors="replace")[-2000:] if log.exists() else ""


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One server for the whole session; each test takes a fresh database of it."""
    yield from start_postgres()


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty history, once as a SQLite file and once as a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    return request.getfixturevalue("postgres").new_database()


def on_postgres(*modules: ModuleType) -> dict[str, Callable[..., Any]]:
    """The tests of `modules` that take `history_url`, again on PostgreSQL: a copy of each (the
    unit module's own function stays as it is), its `history_url` parametrized to
    "postgresql", named test_MODULE__NAME. For an integration module's globals."""
    found: dict[str, Callable[..., Any]] = {}
    for module in modules:
        short = module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
        for name, test in vars(module).items():
            if not (name.startswith("test_") and isinstance(test, FunctionType)
                    and "history_url" in inspect.signature(test).parameters):
                continue
            copy = FunctionType(test.__code__, test.__globals__, name, test.__defaults__,
                                test.__closure__)
            copy.__dict__.update({k: list(v) if isinstance(v, list) else v
                                  for k, v in test.__dict__.items()})
            copy.__doc__, copy.__module__ = test.__doc__, test.__module__
            found[f"test_{short}__{name.removeprefix('test_')}"] = pytest.mark.parametrize(
                "history_url", ["postgresql"], indirect=True)(copy)
    return found
