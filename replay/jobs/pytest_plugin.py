"""pytest plugin: replay committed goldens from a project's own test suite.

    def test_hicache_is_bit_exact(golden_replay):
        golden_replay("goldens/hicache-branching.zarr", expect_cache="mamba:128")

Options: `--golden-server URL` (a running server) or `--golden-launch PROFILE` (the plugin
starts one server for the whole session and stops it at the end), `--golden-model M` for profiles
that need a model, `--golden-attention-backend NAME` for launched SGLang profiles (default: per
visible GPU, docs/profiles.md), `--golden-api NAME` (as `golden replay --api`),
`--golden-log-dir D` for launched servers' logs, `--golden-report-dir D` to
keep every replay's JSON report (CI artifacts), `--golden-history URL` to add every replay to a
results history (docs/history.md), `--golden-api-key KEY` (or the environment's
GOLDEN_API_KEY) for a server started with an API key. Without a server option the tests that use
`golden_replay` are skipped, so a suite stays runnable on machines without an accelerator; an
option given empty (`--golden-server "$UNSET"`) is a usage error (pytest exit 4), never a skip,
and an unreachable server errors every test that uses it.

Verdicts map onto pytest's own: `pass` returns the report dict, `fail` fails the test with the
same first-divergence lines the CLI prints, `error` (no verdict: unreachable server, unreadable
golden, model mismatch) raises GoldenReplayError and is counted as an error, never a failure.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from replay.server.apis import api_help  # the adapter table: names only, no adapter

# The plugin is loaded into every pytest run of an environment that has golden-replay installed,
# so the tool itself (numpy, zarr, aiohttp, rich) is imported only when a test asks for it.

GoldenReplay = Callable[..., dict[str, Any]]


class GoldenReplayError(Exception):
    """A replay reached no verdict (what the CLI reports with exit code 2)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("golden-replay", "golden-replay: replay goldens against a server")
    group.addoption("--golden-server", metavar="URL", default=None,
                    help="Replay goldens against this running SGLang-protocol server.")
    group.addoption("--golden-launch", metavar="PROFILE", default=None,
                    help="Launch this profile (a built-in name or a TOML file) for the session.")
    group.addoption("--golden-model", metavar="MODEL", default=None,
                    help="Model for launch profiles that need one.")
    group.addoption("--golden-attention-backend", metavar="NAME", default=None,
                    help="Attention backend for launched SGLang profiles (default: per visible GPU).")
    group.addoption("--golden-api", metavar="NAME", default="auto",
                    help=f"The server's API: {api_help()}")
    group.addoption("--golden-log-dir", metavar="DIR", default=None,
                    help="Where launched servers write their logs (default: a pytest temp dir).")
    group.addoption("--golden-report-dir", metavar="DIR", default=None,
                    help="Write each replay's JSON report here, named after the test.")
    group.addoption("--golden-history", metavar="URL", default=None,
                    help="Add each replay to this results history (a file or a postgresql:// URL).")
    group.addoption("--golden-api-key", metavar="KEY", default=None,
                    help=f"Bearer token for the server (or {API_KEY_ENV}); never written anywhere.")


API_KEY_ENV = "GOLDEN_API_KEY"
NOT_EMPTY = ("golden_server", "golden_launch", "golden_api_key", "golden_history")


def pytest_configure(config: pytest.Config) -> None:
    """An option given with an empty value is a mistake (typically an unset CI variable), not a
    request to skip: refused before any test runs."""
    for name in NOT_EMPTY:
        value = config.getoption(name, default=None)
        if value is not None and not str(value).strip():
            flag = "--" + name.replace("_", "-")
            raise pytest.UsageError(f"{flag} is empty (an unset CI variable?): give a value, or "
                                    "leave the option out to skip the golden tests")


def api_key(config: pytest.Config) -> str | None:
    """--golden-api-key, else GOLDEN_API_KEY (an empty variable counts as unset)."""
    return config.getoption("golden_api_key") or os.environ.get(API_KEY_ENV) or None


@pytest.fixture(scope="session")
def golden_server(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server URL for the session: the given one, or one launched once and stopped at exit."""
    config = request.config
    server = config.getoption("golden_server")
    launch = config.getoption("golden_launch")
    if not server and not launch:
        pytest.skip("no golden server: pass --golden-server URL or --golden-launch PROFILE")
    from replay.utils.errors import GoldenError
    from replay.server.target import DEFAULT_LOG_DIR, ServerTarget

    log_dir_opt = config.getoption("golden_log_dir")
    if log_dir_opt:
        log_dir = Path(log_dir_opt)  # with --golden-server: refused, never ignored
    else:
        log_dir = tmp_path_factory.mktemp("golden-logs") if launch else DEFAULT_LOG_DIR
    try:
        target = ServerTarget(url=server or None, profile=launch or None,
                              model=config.getoption("golden_model"), log_dir=log_dir,
                              attention_backend=config.getoption("golden_attention_backend"),
                              notify=_say(config))
        with target.serving(api_key(config)) as url:
            yield url
    except GoldenError as exc:
        pytest.fail(f"golden server: {exc}", pytrace=False)


def _say(config: pytest.Config) -> Callable[[str], None]:
    """Launch announcements (the pinned attention backend) on the terminal, past capture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"golden-replay: {line}")
    return say


@pytest.fixture
def golden_replay(golden_server: str, request: pytest.FixtureRequest) -> GoldenReplay:
    """`golden_replay(path, **options) -> report dict`; options as in `golden replay`: every
    field of ReplayOptions (policy, schedule, repeat, expect_cache, require_tier,
    allow_model_mismatch, allow_numerics_mismatch, ...), shard, concurrency, timeout, api."""
    from replay.report.views import first_failure_lines, verdict_line
    from replay.jobs.publish import ReportFiles, publish

    report_dir = request.config.getoption("golden_report_dir")
    history = request.config.getoption("golden_history")
    api = request.config.getoption("golden_api")
    key = api_key(request.config)
    test_dir = request.path.parent

    def run(path: str | Path, **options: Any) -> dict[str, Any]:
        golden_path = resolve_golden_path(Path(path), test_dir)
        doc = replay_golden(golden_server, golden_path, **{"api": api, "api_key": key, **options})
        path = Path(report_dir) / f"{_file_name(request.node.nodeid)}.json" if report_dir else None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        publish(doc, ReportFiles(report=path), history=history)
        if doc["verdict"] == "fail":
            pytest.fail("\n".join([verdict_line(doc), *first_failure_lines(doc)]), pytrace=False)
        if doc["verdict"] == "error":
            raise GoldenReplayError(doc["error"])
        return doc

    return run


def replay_golden(url: str, golden_path: Path, *, shard: str | None = None,
                  concurrency: int = 16, timeout: float = 900.0, api: str = "auto",
                  api_key: str | None = None, **options: Any) -> dict[str, Any]:
    """One replay as a report dict; `options` are ReplayOptions' fields (policy, schedule,
    repeat, expect_cache, ...: those of `golden replay`). Bad options raise UsageError (a mistake
    in the test itself, shown as such); everything else that prevents a verdict is an `error`
    report."""
    from replay.jobs import session
    from replay.server.transport import ClientOptions
    from replay.run.replayer import ReplayOptions
    from replay.golden.shard import parse_shard

    replay_options = ReplayOptions(**options)
    copts = ClientOptions(concurrency=concurrency, request_timeout=timeout, api_key=api_key)
    if shard is not None:
        parse_shard(shard)
    return session.replay_golden(golden_path, session.ServerTarget(url=url), replay_options,
                                 copts, api=api, shard=shard)


def resolve_golden_path(path: Path, test_dir: Path) -> Path:
    """As given (relative to the working directory); failing that, next to the test file."""
    if path.is_absolute() or path.exists():
        return path
    beside = test_dir / path
    return beside if beside.exists() else path


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(GoldenReplayError):
        report.golden_replay_error = True
    return report


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    """A replay that reached no verdict counts as an error, like exit code 2, not a failure."""
    if getattr(report, "golden_replay_error", False) and report.failed:
        return "error", "E", "ERROR"
    return None


def _file_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")
