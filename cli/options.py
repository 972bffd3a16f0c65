"""What every command shares: option declarations (declared once, reused), the error wrapper
(one line and exit 2, never a traceback) and the progress/notify callbacks handed to the library.

Kept free of heavy imports: `golden --help` imports only this, typer, the command modules (whose
bodies import the library when they run) and the adapter table (replay.server.apis: names only).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import typer

from replay.server.apis import api_help  # the adapter table: names only, no adapter imported

F = TypeVar("F", bound=Callable[..., Any])
DEBUG_ENV = "GOLDEN_DEBUG"  # set to 1 for a traceback instead of the one-line error
HISTORY_ENV = "GOLDEN_HISTORY"  # the results history to feed (read once, like --history)


@dataclass(frozen=True)
class GlobalSettings:
    """The global options (`golden --debug --history URL COMMAND`, or GOLDEN_DEBUG and
    GOLDEN_HISTORY), read once by the app's callback into its context object and handed to the
    running command (`global_settings`), which passes them on as values: never written into the
    process environment, so no launched server or router inherits them."""

    debug: bool = False
    history: str | None = None  # a results history location: every report published goes in


@runtime_checkable
class FindsObjects(Protocol):
    """A click context (typer hands the wrapper its own click's, not a typer.Context)."""

    def find_object(self, object_type: type[Any]) -> Any: ...


_RUNNING: contextvars.ContextVar[GlobalSettings] = contextvars.ContextVar(
    "golden_settings", default=GlobalSettings())


def global_settings() -> GlobalSettings:
    """The settings of the command being run (`exits_cleanly` sets them for its duration;
    the defaults outside a command line)."""
    return _RUNNING.get()


def exits_cleanly(fn: F, *, signals: bool = True, listing: bool = False) -> F:
    """Errors become one line on stderr and exit code 2, never a traceback (unless --debug).
    A closed stdout pipe ends quietly (cli/closed_pipe.py): exit 0 for a `listing` command (no
    verdict), else exit 2.
    With `signals`, SIGTERM and SIGHUP interrupt the command like Ctrl-C (`signals_interrupt`);
    `golden serve` keeps the default (a server stopped by SIGTERM just ends). The command gets
    the global settings of its command line (typer hands the wrapper the click context)."""
    signature = inspect.signature(fn)
    takes_ctx = "ctx" in signature.parameters

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from replay.utils.errors import GoldenError

        ctx = kwargs.get("ctx") if takes_ctx else kwargs.pop("ctx", None)
        found = ctx.find_object(GlobalSettings) if isinstance(ctx, FindsObjects) else None
        token = _RUNNING.set(found or GlobalSettings())
        try:
            with signals_interrupt() if signals else contextlib.nullcontext():
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except GoldenError as exc:
            fail(f"error: {exc}")
        except BrokenPipeError:  # `golden ... | head -1`: the reader has what it wanted
            from cli.closed_pipe import end_quietly

            end_quietly(listing)
        except OSError as exc:  # a file or directory the user named cannot be used
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"error: {where}{exc.strerror or exc}")
        except KeyboardInterrupt as exc:
            fail(f"error: {interruption(exc)}")
        except Exception as exc:  # a bug or an input nobody foresaw: still no verdict
            if global_settings().debug:
                raise
            fail(f"error: unexpected {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the "
                 "traceback)")
        finally:
            _RUNNING.reset(token)

    if not takes_ctx:  # typer passes the context to a parameter annotated typer.Context
        ctx_param = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                      annotation=typer.Context)
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[ctx_param, *signature.parameters.values()])
        wrapper.__annotations__ = {"ctx": typer.Context, **getattr(fn, "__annotations__", {})}
    return wrapper  # type: ignore[return-value]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: handled like Ctrl-C (servers stopped, an error report, exit 2)."""


def interruption(exc: KeyboardInterrupt) -> str:
    return f"interrupted ({exc})" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM and SIGHUP raise `Terminated` as Ctrl-C raises
    KeyboardInterrupt, so every `finally` runs: a launched server is stopped, reports say
    `error`. (Signal handlers can only be set from the main thread; elsewhere, nothing changes.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated(signal.Signals(signum).name)

    previous = {s: signal.signal(s, terminate) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def fail(line: str, code: int = 2) -> None:
    from cli.consoles import err  # not cli.render: it needs the library (cli/consoles.py)

    err.print(line, markup=False)
    raise typer.Exit(code)


def notify_stderr(quiet: bool = False) -> Callable[[str], None]:
    def notify(line: str) -> None:
        if not quiet or line.startswith("warning:"):
            from cli import render

            render.err.print(line, markup=False)

    return notify


def progress_bars(quiet: bool) -> Any:
    """The library's ProgressBar callback: a rich bar on stderr, or nothing when quiet."""
    from cli import render

    return lambda label, total: render.progress_bar(label, total, quiet)


# Option declarations, shared by every command that takes them.
ServerOpt = typer.Option(None, "--server", help="Base URL of a running server, e.g. http://127.0.0.1:30000.", show_default=False)
LaunchOpt = typer.Option(None, "--launch", help="Start this server profile instead of --server (see `golden profiles`).", show_default=False)
ControlOpt = typer.Option(None, "--control", help="Also replay against this control profile (launched like --launch: same model and server args, no fault) and say of each failure whether the control has it too: `auto` is the tested profile's own control (docs/control.md).", show_default=False)
ControlServerOpt = typer.Option(None, "--control-server", help="Like --control, but a running control server at this URL.", show_default=False)
ModelOpt = typer.Option(None, "--model", help="Model for --launch profiles that need one (SGLang: a path or hub id).", show_default=False)
LogDirOpt = typer.Option(Path("golden-logs"), "--log-dir", help="Where --launch writes the server's log.")
ServerArgOpt = typer.Option([], "--server-arg", help="Append one argument to the launched server's command line (repeat; use --server-arg=--flag=value).", show_default=False)
FaultOpt = typer.Option(None, "--fault", help="Inject this fault (embedded-engine profiles only; see docs/faults.md).", show_default=False)
ConcurrencyOpt = typer.Option(16, "--concurrency", help="Requests in flight at once.")
ScheduleOpt = typer.Option("lockstep", "--schedule", help="lockstep | interleave | dag (see docs/scenarios.md).")
TimeoutOpt = typer.Option(900.0, "--timeout", help="Seconds allowed for one request.")
ApiKeyOpt = typer.Option(None, "--api-key", envvar="GOLDEN_API_KEY", help="Bearer token (or GOLDEN_API_KEY); never written anywhere.", show_default=False)
AdminApiKeyOpt = typer.Option(None, "--admin-api-key", envvar="GOLDEN_ADMIN_API_KEY", help="The server's admin key (SGLang --admin-api-key), used only to clear L3 storage between repeats; never written anywhere.", show_default=False)
ApiOpt = typer.Option("auto", "--api", help=api_help())
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress output (for CI logs).")
ReferenceOpt = typer.Option("cache-off", "--reference", help="Which reference to record: cache-off (every request from scratch), or cached (the server's cache on and a pool nothing is evicted from, e.g. --launch sglang-radix: follow-up turns reuse decode-written KV as a cached replay does, for kernels whose decode and prefill differ; docs/control.md).")
CheckDeterminismOpt = typer.Option(1, "--check-determinism", help="Record N times; refuse to write unless all agree bit for bit.")
PolicyOpt = typer.Option("exact", "--policy", help="exact | kl:THRESHOLD | ulp:N.")
RepeatOpt = typer.Option(1, "--repeat", help="Replay the whole golden N times (each from an empty cache).")
ExpectCacheOpt = typer.Option("auto", "--expect-cache", help="auto | none | any | attention | mamba:INTERVAL (docs/report.md).")
RequireTierOpt = typer.Option(None, "--require-tier", help="Fail unless some hits came from this tier: host | storage.", show_default=False)
AllowModelMismatchOpt = typer.Option(False, "--allow-model-mismatch", help="Replay even if the server's model differs from the golden's.")
AllowNumericsMismatchOpt = typer.Option(False, "--allow-numerics-mismatch", help="Replay even if the server's numerics settings (attention backend, page size, dtype...) differ from the reference's.")
AttentionBackendOpt = typer.Option(None, "--attention-backend", help="Attention backend for --launch SGLang profiles (default: fa4 on Blackwell, fa3 on Hopper, triton elsewhere; docs/profiles.md).", show_default=False)
ShardOpt = typer.Option(None, "--shard", help="Replay only shard i of n (whole groups), e.g. 2/4.", show_default=False)
GoldenArg = typer.Argument(..., metavar="GOLDEN", help="A golden written by `golden record`.")


# The option groups, one declaration each: field name -> its type for typer and its
# `typer.Option` (the flag is the library's: option_flag(field) for ReplayOptions,
# ClientOptions.FLAGS, ServerTarget.FLAGS). A `takes_*` decorator gives a command a whole group
# as one parameter; tests/unit/run/test_options_parity.py and test_client_target_parity.py fail
# when a field is missing here, from a command, from the pytest plugin or from what repro.sh
# writes back.
REPLAY_FLAGS: dict[str, tuple[Any, Any]] = {  # ReplayOptions, replay/run/replayer.py
    "policy": (str, PolicyOpt),
    "repeat": (int, RepeatOpt),
    "schedule": (str, ScheduleOpt),
    "expect_cache": (str, ExpectCacheOpt),
    "require_tier": (str, RequireTierOpt),
    "allow_model_mismatch": (bool, AllowModelMismatchOpt),
    "allow_numerics_mismatch": (bool, AllowNumericsMismatchOpt),
}
CLIENT_FLAGS: dict[str, tuple[Any, Any]] = {  # ClientOptions, replay/server/transport.py
    "concurrency": (int, ConcurrencyOpt),
    "request_timeout": (float, TimeoutOpt),
    "api_key": (str, ApiKeyOpt),
    "admin_api_key": (str, AdminApiKeyOpt),
}
TARGET_FLAGS: dict[str, tuple[Any, Any]] = {  # ServerTarget, replay/server/target.py
    "url": (str, ServerOpt),
    "profile": (str, LaunchOpt),
    "model": (str, ModelOpt),
    "attention_backend": (str, AttentionBackendOpt),
    "log_dir": (Path, LogDirOpt),
    "extra_args": (list[str], ServerArgOpt),
    "fault": (str, FaultOpt),
}
Override = dict[str, Any]  # field -> a typer.Option (another help), or (type, typer.Option)
# What the commands that record a reference (record, update) do not take: a fault is what a
# replay is there to catch, never part of a reference.
NOT_FOR_A_REFERENCE = ("fault",)


def takes_replay_options(*, override: Override | None = None) -> Callable[[F], F]:
    """Give a command every replay option: its parameter `options` becomes one typer option per
    entry of REPLAY_FLAGS, received back as one `ReplayOptions` (checked on construction)."""
    return expands("options", REPLAY_FLAGS, replay_options, override=override)


def takes_client_options(*, override: Override | None = None) -> Callable[[F], F]:
    """Give a command every client option: its parameter `client` becomes one typer option per
    entry of CLIENT_FLAGS, received back as one `ClientOptions`."""
    return expands("client", CLIENT_FLAGS, client_options, override=override)


def takes_server_target(*, without: tuple[str, ...] = (), override: Override | None = None,
                        many: bool = False) -> Callable[[F], F]:
    """Give a command the server options: its parameter `target` becomes one typer option per
    entry of TARGET_FLAGS (less `without`: the fields the command refuses), received back as one
    `ServerTarget`; with `many`, `--launch` repeats and `target` is one `ServerTarget` per
    profile (a matrix). A launch's choices (the pinned attention backend) go to stderr, by
    default even with --quiet: which kernels ran is part of every result."""
    build = server_targets if many else server_target
    if many:
        launch = typer.Option(..., "--launch", help="A launch profile (name or TOML file); repeat "
                              "for each configuration.", show_default=False)
        override = {"profile": (list[str], launch), **(override or {})}
    return expands("target", TARGET_FLAGS, build, override=override, without=without)


def expands(param: str, flags: dict[str, tuple[Any, Any]], build: Callable[..., Any], *,
            override: Override | None = None, without: tuple[str, ...] = ()) -> Callable[[F], F]:
    """The command's parameter `param` becomes one typer option per entry of `flags` but those
    `without` (in that place, in that order), and the command receives `build(**values)` there.
    `override` replaces an entry's `typer.Option` (another help text; the flag and default stay)
    or, given as (type, option), its type too."""
    chosen = {n: flags[n] for n in flags if n not in without}
    for name, value in (override or {}).items():
        chosen[name] = value if isinstance(value, tuple) else (chosen[name][0], value)

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        if param not in signature.parameters:
            raise TypeError(f"{fn.__name__} has no `{param}` parameter to expand")
        taken = [n for n in chosen if n in signature.parameters]
        if taken:
            raise TypeError(f"{fn.__name__} already has parameter(s) {taken}")
        expanded = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                      default=option, annotation=kind)
                    for n, (kind, option) in chosen.items()]
        params: list[inspect.Parameter] = []
        for p in signature.parameters.values():
            params += expanded if p.name == param else [p]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs[param] = build(**{n: kwargs.pop(n) for n in chosen})
            return fn(*args, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        kept = {k: v for k, v in fn.__annotations__.items() if k != param}
        wrapper.__annotations__ = {**kept, **{n: kind for n, (kind, _) in chosen.items()}}
        return wrapper  # type: ignore[return-value]

    return decorate


def replay_options(**values: Any) -> Any:
    """`ReplayOptions` from the command line's values (keyword-only; unnamed fields default)."""
    from replay.run.replayer import ReplayOptions

    return ReplayOptions(**values)


def client_options(**values: Any) -> Any:
    """`ClientOptions` from the command line's values (unnamed fields default)."""
    from replay.server.transport import ClientOptions

    return ClientOptions(**values)


def server_target(**values: Any) -> Any:
    """`ServerTarget` from the command line's values (unnamed fields default)."""
    from replay.server.target import ServerTarget

    values["extra_args"] = tuple(values.get("extra_args") or ())
    return ServerTarget(**values, notify=notify_stderr())


def server_targets(*, profile: list[str], **values: Any) -> list[Any]:
    """One `ServerTarget` per launch profile, the other values shared (a matrix)."""
    return [server_target(profile=name, **values) for name in profile]
