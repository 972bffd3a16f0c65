"""Start a server from a launch profile, wait until it can answer, and always stop it.

A launch profile (replay/server/profile.py reads and renders it) is an argv template with
placeholders, an environment, a health endpoint and timeouts. `launched` renders it, starts the
server in its own process group with its output in a log file, waits for health plus one tiny
warm-up /generate, yields the base URL, and stops the whole group on every way out (success,
failure, KeyboardInterrupt): SIGTERM, a grace period, then SIGKILL. A watchdog process does the
same if golden-replay itself is killed, even by SIGKILL (replay/server/guard.py).

A server that dies or never becomes healthy is a ServerError (exit 2) whose one-line message ends
with the tail of its log: the line a user needs ("CUDA out of memory", "unknown argument") is
almost always among the last few.

The process handling is deliberately synchronous: a subprocess, a poll loop and urllib. Nothing
here needs the event loop the replay itself runs in.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from replay.server.apis import get_api
from replay.server.guard import watchdog
from replay.server.listener import StrangerListening, Unconfirmed, confirm_listener, someone_listens
from replay.server.process_group import MARKER_ENV, exited_soon, new_marker, stop_process_group
from replay.server.profile import LOOPBACK, LaunchProfile, Notify, Rendered, attention_choice, render
from replay.server.transport import ClientOptions
from replay.utils.errors import GoldenError, ServerError
from replay.utils.redact import REDACTED, argv_secrets, is_secret_key, redact_text, scrubbed_errors

TAIL_LINES = 6
# The log's first lines are ours (the command, then the profile's variables): never in a tail.
HEADER_PREFIXES = ("# golden-replay launch", "#   env ")
# Ports tried before a launch that keeps losing its port to other processes is an error: a port
# race is the machine's doing (parallel jobs, a server picking its own ports), not the user's.
PORT_ATTEMPTS = 3
DEATH_GRACE = 2.0  # seconds a server that just dropped a connection gets to finish dying
TAIL_CHARS = 600
# The tool's own secrets and settings: never inherited by a launched server (a profile may still
# pass one on explicitly in its `env` table): the API keys, the results history (its location,
# and libpq's password and password file, which a history may use) and the debug switch.
PRIVATE_ENV = (*ClientOptions.SECRET_ENV.values(), "GOLDEN_HISTORY", "GOLDEN_DEBUG",
               "PGPASSWORD", "PGPASSFILE")


# ---------------------------------------------------------------------------------------------
# Running a server
# ---------------------------------------------------------------------------------------------


class PortLost(ServerError):
    """Another process took the chosen port before the launched server bound it."""


@contextlib.contextmanager
def launched(profile: LaunchProfile, *, model: str | None, log_path: Path,
             fault: str | None = None, extra_args: Sequence[str] = (),
             host: str = LOOPBACK, attention_backend: str | None = None,
             notify: Notify | None = None, api_key: str | None = None,
             extra_env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Start the profile's server, yield its base URL once it answers, always stop it.
    `extra_env` is set in the server's environment over the profile's own `env` (profile.render).

    A server that lost its port to another process (PortLost) is stopped and started again on a
    fresh port, up to PORT_ATTEMPTS ports; the stranger is never replayed against.

    A GoldenError raised by the caller while the server has meanwhile died is re-raised as a
    ServerError naming the exit code and the log's tail: a connection reset is the symptom, the
    log says the cause.
    """
    for attempt in range(1, PORT_ATTEMPTS + 1):
        answered = False
        try:
            with _launched_once(profile, model=model, log_path=log_path, fault=fault,
                                extra_args=extra_args, host=host,
                                attention_backend=attention_backend, notify=notify,
                                api_key=api_key, extra_env=extra_env) as url:
                answered = True
                yield url
            return
        except PortLost as exc:
            if answered:  # lost during the caller's own work: never start it a second time
                raise
            if attempt == PORT_ATTEMPTS:
                raise PortLost(f"{exc} ({PORT_ATTEMPTS} ports tried)") from None
            if notify is not None:
                notify(f"{exc}; starting it again on another port")


@contextlib.contextmanager
def _launched_once(profile: LaunchProfile, *, model: str | None, log_path: Path,
                   fault: str | None, extra_args: Sequence[str], host: str,
                   attention_backend: str | None, notify: Notify | None, api_key: str | None,
                   extra_env: Mapping[str, str] | None) -> Iterator[str]:
    """One launch on one freshly chosen port (launched's docstring)."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    port = free_port(host)
    url = f"http://{host}:{port}"
    backend = attention_choice(profile, attention_backend, notify)
    marker = new_marker()  # every process of this launch carries it, in its group or not
    with scratch_directory(log_path.parent, profile.name) as scratch, \
            watchdog(profile.stop_timeout, scratch, marker) as dog:
        rendered = render(profile, model=model, port=port, log_dir=log_path.parent, host=host,
                          fault=fault, extra_args=extra_args, scratch_dir=scratch,
                          attention_backend=backend, extra_env=extra_env)
        proc = start_process(rendered, log_path, profile.name, marker)
        dog.watch(proc.pid)  # the dog knew the marker already; now it knows the group too
        try:
            with scrubbed_errors(launch_secrets(rendered, api_key)):
                wait_until_ready(proc, url, profile, log_path, api_key)
                confirm_ours(proc, port, profile)
                try:
                    yield url
                except GoldenError as exc:
                    if exited_soon(proc, DEATH_GRACE):
                        raise ServerError(f"{exc}; {died_message(profile, proc, log_path, 'during the run')}") from exc
                    raise
        finally:
            stop_process_group(proc, profile.stop_timeout, marker)


def launch_secrets(rendered: Rendered, api_key: str | None) -> list[str]:
    """The secret values a launched server may echo into its log: the API key, the values of
    secret-named arguments and of the profile's secret-named variables."""
    named = [v for k, v in rendered.env.items() if is_secret_key(k)]
    return [s for s in (api_key, *argv_secrets(rendered.argv), *named) if s]


@contextlib.contextmanager
def scratch_directory(parent: Path, name: str) -> Iterator[Path]:
    """A fresh empty directory for this launch only (`{scratch_dir}`), removed afterwards: state
    such as an L3 cache directory must never leak from one run into the next."""
    path = Path(tempfile.mkdtemp(prefix=f"{name}-scratch-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def free_port(host: str = LOOPBACK) -> int:
    """A port nobody listens on right now (the OS picks it; a race is possible but rare)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_process(rendered: Rendered, log_path: Path, name: str,
                  marker: str = "") -> subprocess.Popen[bytes]:
    """The server in its own session (so its own process group, out of reach of the terminal's
    Ctrl-C), stdout and stderr into the log, which starts with the command (secrets redacted);
    its environment is `server_env`'s."""
    env = server_env(rendered, marker)
    with open(log_path, "wb") as log:
        header = f"{HEADER_PREFIXES[0]} {name}: {redact_text(rendered.shell())}\n"
        for k, v in rendered.env.items():
            shown = REDACTED if is_secret_key(k) else shlex.quote(v)
            header += f"{HEADER_PREFIXES[1]}{redact_text(f'{k}={shown}')}\n"
        log.write(header.encode())
        log.flush()
        try:
            return subprocess.Popen(rendered.argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=rendered.cwd,
                                    start_new_session=True)
        except OSError as exc:
            raise ServerError(f"cannot start launch profile {name!r}: {rendered.argv[0]}: "
                              f"{exc.strerror or exc}") from None


def server_env(rendered: Rendered, marker: str = "",
               environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A launched server's environment: this process's (less the tool's PRIVATE_ENV), then the
    rendered variables (the profile's and the launch's own: they win), then the launch `marker`
    (replay/server/process_group.py)."""
    inherited = {k: v for k, v in environ.items() if k not in PRIVATE_ENV}
    env = {**inherited, "PYTHONUNBUFFERED": "1", **rendered.env}
    if marker:
        env[MARKER_ENV] = marker
    return env


def wait_until_ready(proc: subprocess.Popen[bytes], url: str, profile: LaunchProfile,
                     log_path: Path, api_key: str | None = None) -> None:
    """Health, then the warm-up (with the API key, for a server that wants one), both within the
    profile's startup timeout."""
    deadline = time.monotonic() + profile.startup_timeout
    wait_until_healthy(proc, url, profile, deadline, log_path)
    if profile.warmup:
        warm_up(proc, url, profile, deadline, log_path, api_key)
    if proc.poll() is not None:  # whatever answered, it was not our server: a port race
        raise PortLost(died_message(profile, proc, log_path, "while another process answered "
                                    "on its port"))


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def confirm_ours(proc: subprocess.Popen[bytes], port: int, profile: LaunchProfile) -> None:
    """The port that answered is held by the launched process (or its children), not by a
    stranger that took it first (replay/server/listener.py); else a ServerError (exit 2)."""
    try:
        confirm_listener(proc.pid, port)
    except Unconfirmed as exc:
        error = PortLost if isinstance(exc, StrangerListening) else ServerError
        raise error(f"launch profile {profile.name!r}: {exc}; refusing to replay against "
                    "a server that may not be the launched one") from None


def wait_until_healthy(proc: subprocess.Popen[bytes], url: str, profile: LaunchProfile,
                       deadline: float, log_path: Path) -> None:
    delay = 0.05
    while True:
        if proc.poll() is not None:
            if someone_listens(port_of(url)):  # it could not bind: another process has the port
                raise PortLost(died_message(profile, proc, log_path, "while another process "
                                            "listened on its port"))
            raise ServerError(died_message(profile, proc, log_path, "before it became healthy"))
        if http_status("GET", url + profile.health, timeout=min(5.0, _left(deadline))) == 200:
            return
        if time.monotonic() >= deadline:
            raise ServerError(f"launch profile {profile.name!r}: {url}{profile.health} not healthy "
                              f"within {profile.startup_timeout:g} s; {log_tail_text(log_path)}")
        time.sleep(min(delay, max(0.0, _left(deadline))))
        delay = min(delay * 2, 1.0)


def warm_up(proc: subprocess.Popen[bytes], url: str, profile: LaunchProfile, deadline: float,
            log_path: Path, api_key: str | None = None) -> None:
    """One tiny generation, asked as the profile's API adapter asks: a healthy server that cannot
    generate should fail here, not mid-replay."""
    path, body = get_api(profile.api).request(np.array(profile.warmup_input_ids, dtype=np.int32), 1, 0)
    status = http_status("POST", url + path, body=body, timeout=max(30.0, _left(deadline)),
                         api_key=api_key)
    if status == 200:
        return
    if proc.poll() is not None:
        raise ServerError(died_message(profile, proc, log_path, "during the warm-up generation"))
    what = "no answer" if status is None else f"HTTP {status}"
    raise ServerError(f"launch profile {profile.name!r}: the warm-up {path} got {what}; "
                      f"{log_tail_text(log_path)}")


def http_status(method: str, url: str, *, timeout: float, body: Any = None,
                api_key: str | None = None) -> int | None:
    """The HTTP status of one exchange, or None when nothing answered. Proxies are bypassed:
    the server is on loopback, and an environment's HTTP(S)_PROXY must not intercept it."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=max(0.1, timeout)) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------


def died_message(profile: LaunchProfile, proc: subprocess.Popen[bytes], log_path: Path,
                 when: str) -> str:
    code = proc.poll()
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
    return f"launch profile {profile.name!r}: the server {how} {when}; {log_tail_text(log_path)}"


def log_tail_text(log_path: Path) -> str:
    lines = log_tail(log_path)
    if not lines:
        return f"its log ({log_path}) is empty"
    text = " | ".join(lines)
    if len(text) > TAIL_CHARS:
        text = "..." + text[-TAIL_CHARS:]
    return f"last log lines ({log_path}): {text}"


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """`text` without terminal colour codes (a server's or router's log, as written to a TTY)."""
    return _ANSI.sub("", text)


def log_tail(log_path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last non-empty lines the server wrote (our own header excluded), compacted."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            raw = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    kept = []
    for line in raw.replace("\r", "\n").splitlines():
        if line.startswith(HEADER_PREFIXES):  # our own header, matched before any squeezing
            continue
        line = " ".join(strip_ansi(line).split())
        if line:
            line = redact_text(line)
            kept.append(line if len(line) <= 240 else line[:240] + "...")
    return _collapse_repeats(kept)[-lines:]


def _collapse_repeats(lines: list[str]) -> list[str]:
    """A line the server repeats (a health poll answered 503 every 0.1 s) is shown once with its
    count, so it cannot push the line a user needs out of the tail."""
    runs: list[list] = []  # [line, count]
    for line in lines:
        if runs and runs[-1][0] == line:
            runs[-1][1] += 1
        else:
            runs.append([line, 1])
    return [line if n == 1 else f"{line} (x{n})" for line, n in runs]


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _left(deadline: float) -> float:
    return deadline - time.monotonic()
