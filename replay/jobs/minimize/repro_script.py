"""Shell words that rerun `golden replay`: repro.sh (a POSIX sh script, `golden minimize`) and the
one-line rerun command of a matrix profile, both from argv lists, every word quoted.

Every word written into the script goes through one function, `sh_word`: a literal is
single-quoted (`shlex.quote`), so a newline, `$(...)`, a backquote or a quote in a model name, a
profile path or a `--server-arg` is data, never code. A secret value is never written: wherever it
occurs in a word it is replaced by a reference to an environment variable (`"${GOLDEN_API_KEY:?...}"`)
that the shell expands when the script runs. Comments hold no user strings (only our own words,
with control characters replaced), so nothing can break out of one.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from replay.run.replayer import ReplayOptions, replay_argv
from replay.server.target import ServerTarget
from replay.server.transport import ClientOptions
from replay.utils.redact import argv_secrets, url_password

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


@dataclass(frozen=True)
class Secret:
    """A value the script must not contain, and the variable it reads it from instead."""

    value: str
    env: str  # e.g. GOLDEN_API_KEY
    what: str  # what it is, for the script's header ("the --api-key of golden")

    def __post_init__(self) -> None:
        if not _ENV_NAME.match(self.env):
            raise ValueError(f"not an environment variable name: {self.env!r}")


def sh_word(word: str, secrets: Sequence[Secret] = ()) -> str:
    """One argv word as sh source that expands to exactly `word` (each secret value in it read
    from its variable; the script stops with a message if that variable is unset)."""
    known = {s.value: s for s in secrets if s.value}
    if not known:
        return shlex.quote(word)
    pattern = "(" + "|".join(re.escape(v) for v in sorted(known, key=len, reverse=True)) + ")"
    parts = []
    for piece in re.split(pattern, word):
        if piece in known:
            env = known[piece].env
            parts.append(f'"${{{env}:?set {env}}}"')
        elif piece:
            parts.append(shlex.quote(piece))
    return "".join(parts) or "''"


def sh_words(argv: Sequence[str], secrets: Sequence[Secret] = ()) -> str:
    return " ".join(sh_word(w, secrets) for w in argv)


def comment(text: str) -> str:
    """Our own text, safe inside a `#` comment: no newline or other control character."""
    return _CONTROL.sub("?", text)


def repro_sh(default_server: Sequence[str], replay_options: Sequence[str], *,
             summary: str, secrets: Sequence[Secret] = ()) -> str:
    """The script: `repro.sh [SERVER_URL] [more golden replay options...]`. `default_server` is
    the argv used without SERVER_URL (`--server URL` or `--launch PROFILE ...`), `replay_options`
    the options found; `summary` one line saying what it reproduces."""
    used = [s for s in secrets
            if any(s.value and s.value in w for w in [*default_server, *replay_options])]
    needs = ""
    if used:
        needs = "".join(f"#   {s.env}: {comment(s.what)}\n" for s in used)
        needs = "# Secrets are not in this file; without SERVER_URL it reads them from:\n" + needs
    return f"""#!/bin/sh
# Written by `golden minimize` (how it was found: minimize.json beside this file).
# {comment(summary)}
# Usage: repro.sh [SERVER_URL] [more `golden replay` options, e.g. --report r.json]
# Without SERVER_URL: the server it was minimized against (the `set --` line below).
{needs}# Exits as `golden replay` does (0 pass, 1 fail, 2 error). Keys for the replay itself come from
# GOLDEN_API_KEY / GOLDEN_ADMIN_API_KEY, as for `golden replay`.
# Set GOLDEN to run another build of the tool, e.g. GOLDEN="python3 -m cli".
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
case "${{1:-}}" in
    ""|-*) set -- {sh_words(default_server, secrets)} "$@" ;;
    *) url=$1; shift; set -- --server "$url" "$@" ;;
esac
exec ${{GOLDEN:-golden}} replay "$here/golden.zarr" {sh_words(replay_options, secrets)} "$@"
"""


def script_secrets(target: ServerTarget, client: ClientOptions) -> list[Secret]:
    """Every secret the script's words may contain, each with the variable it is read from:
    golden's own keys, a URL's password, the values of secret-named `--server-arg`s."""
    secrets = [Secret(client.api_key, "GOLDEN_API_KEY", "the --api-key given to golden")] \
        if client.api_key else []
    if client.admin_api_key:
        secrets.append(Secret(client.admin_api_key, "GOLDEN_ADMIN_API_KEY",
                              "the --admin-api-key given to golden"))
    password = url_password(target.url) if target.url else None
    if password:
        secrets.append(Secret(password, "GOLDEN_SERVER_PASSWORD", "the password in --server"))
    known = {s.value for s in secrets}
    others = [v for v in argv_secrets(list(target.extra_args)) if v not in known]
    secrets += [Secret(v, f"GOLDEN_SECRET_{n}", f"secret value #{n} of the --server-args")
                for n, v in enumerate(others, 1)]
    return secrets


def rerun_command(golden: str, target: ServerTarget, options: ReplayOptions, client: ClientOptions,
                  *, api: str = "auto", shard: str | None = None) -> str:
    """One shell line that replays `golden` against `target` as this run did (a matrix profile's
    `rerun`): every replay option, the API, the concurrency and the shard; secrets as references
    to their environment variables (script_secrets), so the line is safe to print and store."""
    argv = ["golden", "replay", golden, *target.argv(), "--api", api, *replay_argv(options),
            "--concurrency", str(client.concurrency)]
    argv += ["--shard", shard] if shard else []
    return sh_words(argv, script_secrets(target, client))
