"""Where the server is: the one description of a server to talk to, a running one (`url`) or a
launch profile to start and stop, with what the launch is given. Every job takes one
(`replay_golden`, `record_golden`, minimize, update, detection, the pytest plugin) and a matrix
takes one per profile; it checks itself on construction and its profile before anything starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, ContextManager

from replay.utils.errors import UsageError
from replay.utils.redact import redact_text

if TYPE_CHECKING:
    from replay.server.profile import LaunchProfile

Notify = Callable[[str], None]
DEFAULT_LOG_DIR = Path("golden-logs")


@dataclass(frozen=True)
class ServerTarget:
    """A running server (`url`) or a launch profile (`profile`), exactly one; the launch
    fields apply to a profile only."""

    # Each field's command-line flag (cli/options.py TARGET_FLAGS declares each once; `argv`
    # writes them back; the pytest plugin offers each as --golden-NAME): the parity test
    # tests/unit/run/test_client_target_parity.py fails on a field without one.
    FLAGS: ClassVar[dict[str, str]] = {
        "url": "--server", "profile": "--launch", "model": "--model", "log_dir": "--log-dir",
        "fault": "--fault", "extra_args": "--server-arg", "attention_backend": "--attention-backend"}

    url: str | None = None
    profile: str | None = None  # a built-in profile name or a TOML file
    model: str | None = None  # for profiles that need one
    log_dir: Path = DEFAULT_LOG_DIR
    fault: str | None = None  # embedded-engine profiles only
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    attention_backend: str | None = None  # SGLang profiles; None: the visible GPU's default
    notify: Notify | None = field(default=None, compare=False)  # hears the launcher's choices

    def __post_init__(self) -> None:
        if (self.url is None) == (self.profile is None):
            raise UsageError("give exactly one of --server URL or --launch PROFILE")
        if self.url is not None:
            check_url(self.url, self.FLAGS["url"])
        if self.url is not None and (self.fault or self.extra_args or self.attention_backend):
            raise UsageError("--fault, --server-arg and --attention-backend apply only with "
                             "--launch")
        if self.url is not None and (self.model or Path(self.log_dir) != DEFAULT_LOG_DIR):
            given = "--model" if self.model else "--log-dir"
            raise UsageError(f"{given} applies only with --launch (a server given by --server "
                             "runs with its own model and writes its own log)")

    @property
    def label(self) -> str:
        """How reports name the server before it answers (credentials never shown)."""
        if self.url:
            return redact_text(self.url)
        name = str(self.profile)
        return f"launch:{Path(name).stem if name.endswith('.toml') else name}"

    @property
    def setup_label(self) -> str:
        """The label plus what changes the launched server's behaviour (the fault, the pinned
        attention backend), so shard reports of different servers never merge. Server args are
        left out: they may hold secrets."""
        extra = [f"fault={self.fault}"] if self.fault else []
        extra += [f"attention_backend={self.attention_backend}"] if self.attention_backend else []
        return " ".join([self.label, *extra])

    def argv(self) -> list[str]:
        """The command-line options that name this server to `golden` (`--server URL`, or
        `--launch PROFILE` with each launch field that is set): what a rerun command or repro.sh
        passes. Secrets stay in the words; the shell writer replaces them
        (replay/jobs/minimize/repro_script.py)."""
        flag = self.FLAGS
        if self.url is not None:
            return [flag["url"], self.url]
        argv = [flag["profile"], str(self.profile)]
        for name in ("model", "fault", "attention_backend"):
            value = getattr(self, name)
            argv += [flag[name], value] if value else []
        if Path(self.log_dir) != DEFAULT_LOG_DIR:
            argv += [flag["log_dir"], str(self.log_dir)]
        return argv + [f"{flag['extra_args']}={a}" for a in self.extra_args]

    def launch_profile(self) -> "LaunchProfile":
        """The profile, loaded and checked against the launch fields (a missing --model, a
        fault it cannot take): a UsageError before anything starts."""
        from replay.server.profile import check_values, load_profile

        if self.profile is None:
            raise UsageError(f"{self.label} is a running server, not a launch profile")
        profile = load_profile(self.profile)
        check_values(profile, model=self.model, fault=self.fault,
                     attention_backend=self.attention_backend)
        return profile

    def check(self) -> None:
        """Everything that can be checked before a server starts: a launch names a profile or
        topology that exists and takes the launch fields (a UsageError; a URL checked itself)."""
        if self.profile is None:
            return
        from replay.server import topology

        if topology.is_topology(self.profile):
            topology.load_topology(self.profile)
        else:
            self.launch_profile()

    def log_path(self, profile: "LaunchProfile") -> Path:
        return Path(self.log_dir) / f"{profile.name}.log"

    def serving(self, api_key: str | None = None) -> ContextManager[str]:
        """A context yielding the URL: the given one, or a launched server's (always stopped;
        `api_key` goes with its warm-up request, for a server started with one)."""
        if self.url is not None:
            return contextlib.nullcontext(self.url)
        from replay.server import launch, topology  # subprocess machinery only when launching

        assert self.profile is not None
        if topology.is_topology(self.profile):  # workers behind SGLang's router
            return topology.launched_topology(
                topology.load_topology(self.profile), model=self.model, log_dir=self.log_dir,
                fault=self.fault, extra_args=self.extra_args, notify=self.notify,
                api_key=api_key, attention_backend=self.attention_backend)
        profile = self.launch_profile()
        return launch.launched(profile, model=self.model, log_path=self.log_path(profile),
                               fault=self.fault, extra_args=self.extra_args,
                               attention_backend=self.attention_backend, notify=self.notify,
                               api_key=api_key)


def check_url(url: str, flag: str) -> None:
    """A server URL names its scheme: `localhost:30000` would otherwise fail later as a
    connection to nowhere, without a word on why. Credentials in it are never shown."""
    if "://" not in url:
        shown = redact_text(f"http://{url}")
        raise UsageError(f"{flag} {shown[len('http://'):]!r} has no scheme; did you mean "
                         f"{shown}?")


def control_target(target: ServerTarget, control: str | None = None,
                   control_server: str | None = None) -> ServerTarget | None:
    """The control of a replay (docs/control.md), from `--control PROFILE|auto` (launched like
    `target`: the same model, attention backend and server args, but no fault, since the fault
    is what is under test; `auto` is the tested profile's own `control`) or `--control-server
    URL` (a running server); None when neither is given. Checked before anything starts."""
    if control is not None and control_server is not None:
        raise UsageError("give --control PROFILE or --control-server URL, not both")
    if control_server is not None:
        check_url(control_server, "--control-server")
        return ServerTarget(url=control_server, notify=target.notify)
    if control is None:
        return None
    if target.profile is None:
        raise UsageError("--control PROFILE launches the control like the tested server, so it "
                         "needs --launch; against a running control use --control-server URL")
    if control == "auto":
        named = target.launch_profile().control
        if named is None:
            raise UsageError(f"launch profile {target.profile!r} names no control: pass "
                             "--control PROFILE (golden profiles lists each profile's control)")
        control = named
    twin = replace(target, profile=control, fault=None)
    twin.launch_profile()  # a missing or unusable profile: refused before anything starts
    return twin
