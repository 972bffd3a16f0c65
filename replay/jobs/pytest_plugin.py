"""pytest plugin: replay committed goldens from a project's own test suite.

    def test_hicache_is_bit_exact(golden_replay):
        golden_replay("goldens/hicache-branching.zarr", expect_cache="mamba:128")

Options: `--golden-server URL` (a running server) or `--golden-launch PROFILE` (the plugin
starts one server for the whole session and stops it at the end), with every other server option
of `golden replay` under the same name with `golden-` in front (`--golden-model M`,
`--golden-attention-backend NAME`, `--golden-log-dir D`, `--golden-server-arg ARG`,
`--golden-fault NAME`: `TARGET_OPTIONS`); `--golden-api NAME` (as `golden replay --api`);
`--golden-report-dir D` to keep every replay's JSON report (CI artifacts); `--golden-history URL`
to add every replay to a results history (docs/history.md); `--golden-api-key KEY` and
`--golden-admin-api-key KEY` (or the environment's GOLDEN_API_KEY, GOLDEN_ADMIN_API_KEY) for a
server started with keys. Without a server option the tests that use `golden_replay` are skipped,
so a suite stays runnable on machines without an accelerator; an option given empty
(`--golden-server "$UNSET"`) is a usage error (pytest exit 4), never a skip, as is a server
option that cannot work (a misspelt `--golden-launch`, a URL without a scheme): one line before
any test runs. An unreachable server errors every test that uses it.

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


# The server options, one per field of ServerTarget (its flag with `golden-` in front:
# --golden-server, --golden-launch, ...): field -> (metavar, help). The parity test
# (tests/unit/run/test_client_target_parity.py) fails when a field has none.
TARGET_OPTIONS: dict[str, tuple[str, str]] = {
    "url": ("URL", "Replay goldens against this running server."),
    "profile": ("PROFILE", "Launch this profile (a built-in name or a TOML file) for the session."),
    "model": ("MODEL", "Model for launch profiles that need one."),
    "attention_backend": ("NAME", "Attention backend for launched SGLang profiles (default: per "
                                  "visible GPU)."),
    "log_dir": ("DIR", "Where launched servers write their logs (default: a pytest temp dir)."),
    "extra_args": ("ARG", "Append one argument to the launched server's command line (repeat)."),
    "fault": ("NAME", "Inject this fault into the launched server (embedded-engine profiles)."),
}
# The client's secrets, from an option or the variable golden itself reads (ClientOptions.SECRET_ENV).
SECRET_OPTIONS: dict[str, tuple[str, str]] = {
    "api_key": ("--golden-api-key", "GOLDEN_API_KEY"),
    "admin_api_key": ("--golden-admin-api-key", "GOLDEN_ADMIN_API_KEY"),
}


def target_option(field: str) -> str:
    """The plugin's flag for a ServerTarget field: --golden-server, --golden-launch, ..."""
    from replay.server.target import ServerTarget

    return "--golden-" + ServerTarget.FLAGS[field].removeprefix("--")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("golden-replay", "golden-replay: replay goldens against a server")
    for field, (metavar, help_text) in TARGET_OPTIONS.items():
        group.addoption(target_option(field), metavar=metavar, help=help_text,
                        **({"action": "append", "default": []} if field == "extra_args"
                           else {"default": None}))
    group.addoption("--golden-api", metavar="NAME", default="auto",
                    help=f"The server's API: {api_help()}")
    group.addoption("--golden-report-dir", metavar="DIR", default=None,
                    help="Write each replay's JSON report here, named after the test.")
    group.addoption("--golden-history", metavar="URL", default=None,
                    help="Add each replay to this results history (a file or a postgresql:// URL).")
    for field, (flag, env) in SECRET_OPTIONS.items():
        group.addoption(flag, metavar="KEY", default=None,
                        help=f"{'Bearer token' if field == 'api_key' else 'Admin key'} for the "
                             f"server (or {env}); never written anywhere.")


NOT_EMPTY = ("golden_server", "golden_launch", "golden_api_key", "golden_admin_api_key",
             "golden_history")


def pytest_configure(config: pytest.Config) -> None:
    """An option given with an empty value is a mistake (typically an unset CI variable), not a
    request to skip: refused before any test runs."""
    for name in NOT_EMPTY:
        value = config.getoption(name, default=None)
        if value is not None and not str(value).strip():
            flag = "--" + name.replace("_", "-")
            raise pytest.UsageError(f"{flag} is empty (an unset CI variable?): give a value, or "
                                    "leave the option out to skip the golden tests")
    if config.getoption("golden_server") or config.getoption("golden_launch"):
        check_target(config)


def check_target(config: pytest.Config) -> None:
    """A server option that cannot work (a misspelt --golden-launch, a profile without its
    --golden-model) is a usage error, one line before any test runs: not an error per test with
    the message twice over a chained traceback."""
    from replay.server.target import ServerTarget
    from replay.utils.errors import GoldenError

    try:
        session_target(config, None).check()
    except GoldenError as exc:  # the library names golden's flags: say the plugin's
        flags = "|".join(f.removeprefix("--") for f in
                         sorted(ServerTarget.FLAGS.values(), key=len, reverse=True))
        message = re.sub(rf"(?<![\w-])--({flags})(?![\w-])", r"--golden-\1", str(exc))
        raise pytest.UsageError(message) from None


def secrets(config: pytest.Config) -> dict[str, str | None]:
    """The client's secrets: each option, else its variable (an empty one counts as unset)."""
    return {field: config.getoption(flag.removeprefix("--").replace("-", "_"))
            or os.environ.get(env) or None for field, (flag, env) in SECRET_OPTIONS.items()}


def session_target(config: pytest.Config, log_dir: Path | None) -> Any:
    """The ServerTarget the session's options name (every field from its --golden- option;
    a launch's logs in `log_dir` unless --golden-log-dir names a folder)."""
    from replay.server.target import DEFAULT_LOG_DIR, ServerTarget

    values = {f: config.getoption(target_option(f).removeprefix("--").replace("-", "_"))
              for f in TARGET_OPTIONS}
    values = {k: (v or None) if k in ("url", "profile") else v for k, v in values.items()}
    given = values["log_dir"]  # with --golden-server: refused by ServerTarget, never ignored
    values["log_dir"] = Path(given) if given else (log_dir or DEFAULT_LOG_DIR)
    values["extra_args"] = tuple(values["extra_args"] or ())
    return ServerTarget(**values, notify=_say(config))


@pytest.fixture(scope="session")
def golden_server(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server URL for the session: the given one, or one launched once and stopped at exit."""
    config = request.config
    if not config.getoption("golden_server") and not config.getoption("golden_launch"):
        pytest.skip("no golden server: pass --golden-server URL or --golden-launch PROFILE")
    from replay.utils.errors import GoldenError

    failure = None
    try:
        launching = bool(config.getoption("golden_launch"))
        given = config.getoption("golden_log_dir")
        target = session_target(config, tmp_path_factory.mktemp("golden-logs")
                                if launching and not given else None)
        with target.serving(secrets(config)["api_key"]) as url:
            yield url
    except GoldenError as exc:
        failure = f"golden server: {exc}"
    if failure is not None:  # failed outside the handler: one message, no chained traceback
        pytest.fail(failure, pytrace=False)


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
    keys = secrets(request.config)
    test_dir = request.path.parent

    def run(path: str | Path, **options: Any) -> dict[str, Any]:
        golden_path = resolve_golden_path(Path(path), test_dir)
        doc = replay_golden(golden_server, golden_path, **{"api": api, **keys, **options})
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


def replay_golden(url: str, golden_path: Path, *, shard: str | None = None, api: str = "auto",
                  **options: Any) -> dict[str, Any]:
    """One replay as a report dict. `options` are ReplayOptions' fields (policy, schedule,
    repeat, expect_cache, ...: those of `golden replay`) and the client options, named like
    their flags (concurrency, timeout, api_key, admin_api_key). Bad options raise UsageError (a
    mistake in the test itself, shown as such); everything else that prevents a verdict is an
    `error` report."""
    from replay.jobs import session
    from replay.server.transport import ClientOptions
    from replay.run.replayer import ReplayOptions
    from replay.golden.shard import parse_shard

    keywords = {f: flag.removeprefix("--").replace("-", "_")
                for f, flag in ClientOptions.FLAGS.items()}
    copts = ClientOptions(**{f: options.pop(k) for f, k in keywords.items() if k in options})
    replay_options = ReplayOptions(**options)
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
