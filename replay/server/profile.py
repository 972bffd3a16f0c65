"""Launch profiles: what a server is started with, read from TOML and rendered into an argv.

A launch profile (a TOML file; built-ins in replay/server/profiles/, fields in docs/profiles.md) is
an argv template with placeholders, an environment, a health endpoint and timeouts. This module
reads one (every key and placeholder checked when it is loaded, so a typo is an error before
anything starts) and fills its placeholders; starting, watching and stopping the process it
describes is replay/server/launch.py's job.
"""

from __future__ import annotations

import math
import shlex
import string
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from replay.server.apis import check_api_name
from replay.server.gpu import choose_attention_backend
from replay.utils.errors import UsageError

LOOPBACK = "127.0.0.1"
# Placeholders a profile may use. The launcher fills python, host, port, log_dir, scratch_dir and
# replay_root itself; model and fault come from the user and are required when used in `command`
# or `env` (and optional when used only in `optional_args`); attention_backend comes from the user
# or, when not given, from the GPU the launcher sees (replay/server/gpu.py), so it is never required.
AUTOMATIC = ("python", "host", "port", "log_dir", "scratch_dir", "replay_root")
USER_GIVEN = ("model", "fault", "attention_backend")
DEFAULTED = ("attention_backend",)
PLACEHOLDERS = AUTOMATIC + USER_GIVEN
Notify = Callable[[str], None]
PROFILE_KEYS = {
    "name", "description", "command", "env", "optional_args", "cwd", "health",
    "startup_timeout", "stop_timeout", "warmup", "warmup_input_ids", "api", "control",
}


@dataclass(frozen=True)
class LaunchProfile:
    """One way to start a server. Field meanings: docs/profiles.md."""

    name: str
    description: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    optional_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    cwd: str | None = None
    health: str = "/health"
    startup_timeout: float = 600.0  # seconds until health and warm-up must have succeeded
    stop_timeout: float = 30.0  # seconds between SIGTERM and SIGKILL
    warmup: bool = True
    warmup_input_ids: tuple[int, ...] = (1, 2, 3, 4)
    api: str = "sglang"  # the API the server speaks: its adapter builds the warm-up request
    source: str = "built-in"  # "built-in" or the TOML file it came from
    # The profile of this server's control twin: the same numerics with the part under test off
    # (a HiCache profile's radix-only server); what `golden replay --control auto` launches.
    control: str | None = None

    @property
    def required(self) -> list[str]:
        """User-given placeholders the profile cannot start without."""
        used = _placeholders_in(self.templates(with_optional=False))
        return [p for p in USER_GIVEN if p in used and p not in DEFAULTED]

    @property
    def accepts(self) -> list[str]:
        """User-given placeholders the profile uses at all (required or optional)."""
        used = _placeholders_in(self.templates(with_optional=True)) | set(self.optional_args)
        return [p for p in USER_GIVEN if p in used]

    def templates(self, *, with_optional: bool) -> list[str]:
        """Every string that placeholders are filled into."""
        found = [*self.command, *self.env.values(), *([self.cwd] if self.cwd else [])]
        if with_optional:
            for args in self.optional_args.values():
                found.extend(args)
        return found


@dataclass(frozen=True)
class Rendered:
    """A profile with every placeholder filled: what will actually run."""

    argv: list[str]
    env: dict[str, str]  # the profile's variables and the launch's own (the rest is inherited)
    cwd: str | None

    def shell(self) -> str:
        return shlex.join(self.argv)


def builtin_profile_names() -> list[str]:
    folder = resources.files("replay.server") / "profiles"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def builtin_profiles() -> list[LaunchProfile]:
    return [load_profile(name) for name in builtin_profile_names()]


def load_profile(name_or_path: str) -> LaunchProfile:
    """A built-in profile by name, or a user's TOML file by path."""
    builtin = resources.files("replay.server") / "profiles" / f"{name_or_path}.toml"
    if "/" not in name_or_path and builtin.is_file():
        return parse_profile(builtin.read_text(), default_name=name_or_path, source="built-in")
    path = Path(name_or_path)
    if path.is_file():
        return parse_profile(path.read_text(), default_name=path.stem, source=str(path))
    known = ", ".join(builtin_profile_names())
    raise UsageError(f"no launch profile or file named {name_or_path!r} (built-in: {known})")


def parse_profile(text: str, *, default_name: str, source: str) -> LaunchProfile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"launch profile {source}: not valid TOML: {exc}") from None
    where = f"launch profile {source}"
    unknown = sorted(set(data) - PROFILE_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}")
    command = _string_list(data.get("command"), f"{where}: command")
    if not command:
        raise UsageError(f"{where}: command must be a non-empty list of strings")
    env = _string_table(data.get("env", {}), f"{where}: env")
    optional = data.get("optional_args", {})
    if not isinstance(optional, dict):
        raise UsageError(f"{where}: optional_args must be a table of string lists")
    optional_args = {k: tuple(_string_list(v, f"{where}: optional_args.{k}"))
                     for k, v in optional.items()}
    bad_optional = sorted(set(optional_args) - set(USER_GIVEN))
    if bad_optional:
        raise UsageError(f"{where}: optional_args keys must be among {', '.join(USER_GIVEN)}, "
                         f"got {', '.join(bad_optional)}")
    profile = LaunchProfile(
        name=_string(data.get("name", default_name), f"{where}: name"),
        description=_string(data.get("description", ""), f"{where}: description"),
        command=tuple(command),
        env=env,
        optional_args=optional_args,
        cwd=_string(data["cwd"], f"{where}: cwd") if "cwd" in data else None,
        health=_string(data.get("health", "/health"), f"{where}: health"),
        startup_timeout=_positive(data.get("startup_timeout", 600.0), f"{where}: startup_timeout"),
        stop_timeout=_positive(data.get("stop_timeout", 30.0), f"{where}: stop_timeout"),
        warmup=_bool(data.get("warmup", True), f"{where}: warmup"),
        warmup_input_ids=tuple(_int_list(data.get("warmup_input_ids", [1, 2, 3, 4]),
                                         f"{where}: warmup_input_ids")),
        api=check_api_name(_string(data.get("api", "sglang"), f"{where}: api")),
        source=source,
        control=_string(data["control"], f"{where}: control") if "control" in data else None,
    )
    _check_placeholders(profile, where)
    return profile


def render(profile: LaunchProfile, *, model: str | None, port: int, log_dir: Path,
           host: str = LOOPBACK, fault: str | None = None, extra_args: Sequence[str] = (),
           scratch_dir: Path | None = None, attention_backend: str | None = None,
           extra_env: Mapping[str, str] | None = None) -> Rendered:
    """Fill the placeholders. A missing required value or an unusable one is a UsageError.
    `attention_backend` is the chosen one (see `attention_choice`), needed when the profile uses it.
    `extra_env`: variables the launch itself sets (a topology's per-worker ones, a driver's), taken
    as given and winning over the profile's `env`, like `extra_args` over its command."""
    check_values(profile, model=model, fault=fault, attention_backend=attention_backend)
    if "attention_backend" in _placeholders_in(profile.templates(with_optional=False)) \
            and not attention_backend:
        raise UsageError(f"launch profile {profile.name!r} needs an attention backend")
    values = {
        "python": sys.executable, "host": host, "port": str(port), "log_dir": str(log_dir),
        "scratch_dir": str(scratch_dir if scratch_dir is not None else log_dir / "scratch"),
        "replay_root": str(Path(__file__).resolve().parents[2]),
        "model": model or "", "fault": fault or "", "attention_backend": attention_backend or "",
    }
    argv = [_fill(a, values) for a in profile.command]
    given = {"model": model, "fault": fault, "attention_backend": attention_backend}
    for key, args in profile.optional_args.items():
        if given.get(key):
            argv.extend(_fill(a, values) for a in args)
    argv.extend(extra_args)
    env = {**{k: _fill(v, values) for k, v in profile.env.items()}, **(extra_env or {})}
    cwd = _fill(profile.cwd, values) if profile.cwd else None
    return Rendered(argv=argv, env=env, cwd=cwd)


def check_values(profile: LaunchProfile, *, model: str | None, fault: str | None,
                 attention_backend: str | None = None) -> None:
    """Refuse before anything starts: a needed model missing, or a value the profile can't take."""
    if "model" in profile.required and not model:
        raise UsageError(f"launch profile {profile.name!r} needs a model: pass --model PATH")
    if "fault" in profile.required and not fault:
        raise UsageError(f"launch profile {profile.name!r} needs a fault: pass --fault NAME")
    if fault and "fault" not in profile.accepts:
        raise UsageError(f"launch profile {profile.name!r} takes no fault (only the embedded "
                         "engine's profiles inject faults)")
    if attention_backend and "attention_backend" not in profile.accepts:
        raise UsageError(f"launch profile {profile.name!r} takes no --attention-backend (it has "
                         "no {attention_backend} placeholder: it pins its own or has none)")


def attention_choice(profile: LaunchProfile, given: str | None,
                     notify: Notify | None = None) -> str | None:
    """The backend to fill into `{attention_backend}` (None when the profile has none): the
    given one, else the default for the visible GPU. Always announced through `notify`."""
    if "attention_backend" not in profile.accepts:
        return None
    choice = choose_attention_backend(given)
    if notify:
        notify(f"launch profile {profile.name}: {choice.line()}")
    return choice.backend


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


class _Values(dict[str, str]):
    def __missing__(self, key: str) -> str:
        raise UsageError(f"unknown placeholder {{{key}}}")


def _fill(template: str, values: Mapping[str, str]) -> str:
    return template.format_map(_Values(values))


def _placeholders_in(templates: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for t in templates:
        for _, name, _, _ in string.Formatter().parse(t):
            if name is not None:
                found.add(name)
    return found


def _check_placeholders(profile: LaunchProfile, where: str) -> None:
    try:
        used = _placeholders_in(profile.templates(with_optional=True))
    except ValueError as exc:  # an unmatched brace
        raise UsageError(f"{where}: bad placeholder syntax: {exc}") from None
    unknown = sorted(used - set(PLACEHOLDERS))
    if unknown:
        raise UsageError(f"{where}: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)} "
                         f"(known: {', '.join(PLACEHOLDERS)})")


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{what} must be a string")
    return value


def _string_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{what} must be a list of strings")
    return list(value)


def _int_list(value: Any, what: str) -> list[int]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
        raise UsageError(f"{what} must be a non-empty list of token ids")
    return list(value)


def _string_table(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise UsageError(f"{what} must be a table of strings")
    return dict(value)


def _positive(value: Any, what: str) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0
            or not math.isfinite(value)):
        raise UsageError(f"{what} must be a finite positive number of seconds, not {value!r}")
    return float(value)


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{what} must be true or false")
    return value
