"""Redaction of secrets in server metadata, launch commands, URLs and database locations: the
one place that knows every form a secret takes (`user:password@host`, `password=` and
`sslpassword=` in a URL's query or a libpq keyword string, `passfile=`, API keys and tokens in
flags, variables and headers).

Goldens and reports store what servers say about themselves; a server may echo an API key in its
arguments or launch command. Everything written passes through `redact_secrets` first.

Names are not enough: a server may echo a secret anywhere (an error body, an unknown settings
field, a log line). The secret values the tool itself knows (`--api-key`, a URL's password) are
therefore also replaced wherever they occur (`scrub`, `scrub_values`): by the transport in
everything it hands on, and by the session in every error it reports.
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from replay.utils.errors import GoldenError

REDACTED = "<redacted>"


_SECRET_PARTS = (
    "apikey", "api_key", "secret", "password", "passwd", "authorization", "credential",
    "private_key", "access_key", "cookie", "passfile",
)
# `<qualifier>_key` names a credential (ADMIN_KEY, --auth-key, MASTER_KEY); other keys (cache_key,
# sort_key) are not secrets.
_KEY_QUALIFIERS = (
    "admin", "auth", "master", "service", "signing", "encryption", "session", "license", "client",
    "bearer", "user", "account", "hmac", "jwt", "root", "app",
)
# Tokenizer special-token names ("bos_token": "<s>") are not secrets.
_BENIGN_TOKEN_PREFIXES = ("bos", "eos", "pad", "unk", "sep", "cls", "mask")
_FLAG_RE = re.compile(
    r"(?P<flag>--?[A-Za-z][\w.-]*)"
    r"(?:(?P<eq>=)(?P<v1>\"[^\"]*\"|'[^']*'|\S+)|(?P<ws>\s+)(?P<v2>\"[^\"]*\"|'[^']*'|[^\s\"'-]\S*))"
)
# NAME=VALUE in an environment, a libpq keyword string (`password='a b'`) or a URL's query
# (`?password=x&sslmode=require`: the value ends at `&`).
_ENV_RE = re.compile(r"(?<![\w-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)="
                     r"(?P<value>'(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^\s&]+)")
_BEARER_RE = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_URL_USERINFO_RE = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


def is_secret_key(name: str) -> bool:
    """Whether a key or flag name names a credential: api_key, api-key, apiKey, secret,
    password, authorization, hf_token, access_token, admin_key, ... but not token counts or tokenizer
    settings (cached_tokens, max_total_tokens, token_lo, tokenizer_path, eos_token_id)."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.lstrip("-")).lower()
    snake = re.sub(r"[^a-z0-9]+", "_", snake).strip("_")
    if any(part in snake for part in _SECRET_PARTS):
        return True
    words = [w for w in snake.split("_") if w]
    if len(words) > 1 and words[-1] == "key" and words[-2] in _KEY_QUALIFIERS:
        return True
    if not words or not words[-1].endswith("token"):
        return False
    if words[-1] == "token" and len(words) > 1 and words[-2] in _BENIGN_TOKEN_PREFIXES:
        return False
    return True


def redact_text(text: str) -> str:
    """The text with the secret replaced in `--api-key X`, `--hf-token=X`, `HF_TOKEN=X`,
    `password='X'`, `?password=X&sslpassword=Y`, `passfile=P`, `Bearer X` and
    `scheme://user:password@host` (launch commands, URLs, database locations, headers)."""

    def flag(m: re.Match[str]) -> str:
        if not is_secret_key(m["flag"]):
            return m[0]
        sep = m["eq"] or m["ws"]
        return f"{m['flag']}{sep}{REDACTED}"

    def env(m: re.Match[str]) -> str:
        return f"{m['name']}={REDACTED}" if is_secret_key(m["name"]) else m[0]

    text = _FLAG_RE.sub(flag, text)
    text = _ENV_RE.sub(env, text)
    text = _URL_USERINFO_RE.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    return _BEARER_RE.sub(lambda m: f"{m[1]} {REDACTED}", text)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """The text with every occurrence of each known secret value replaced: for what a server or
    a launched process may echo back verbatim (an API key in an error body, a log line)."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return text


@contextlib.contextmanager
def scrubbed_errors(secrets: Sequence[str]) -> Iterator[None]:
    """Re-raise an exception of the tool (a launched server's log tail, an echoing server)
    whose message holds one of `secrets` with each occurrence replaced."""
    try:
        yield
    except GoldenError as exc:
        clean = scrub(str(exc), secrets)
        if clean == str(exc):
            raise
        raise type(exc)(clean) from None


def scrub_values(value: Any, secrets: Sequence[str]) -> Any:
    """A copy of a JSON-like value with `scrub` applied to every string in it (keys included)."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {scrub_values(k, secrets): scrub_values(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_values(v, secrets) for v in value]
    return value


def location_secrets(where: str) -> tuple[str, ...]:
    """The secret values a database location holds, for `scrub`: its URL's password (and the
    HTTP Basic form), and the values of secret-named query parameters or libpq keywords
    (`password`, `sslpassword`, `passfile`)."""
    found = list(url_secrets(where))
    try:
        query = urlsplit(where).query
    except ValueError:
        query = ""
    found += [v for k, v in parse_qsl(query, keep_blank_values=False) if is_secret_key(k)]
    for m in _ENV_RE.finditer(where):
        if is_secret_key(m["name"]):
            value = m["value"]
            found += [value, value.strip("'\"")]
    return tuple(dict.fromkeys(s for s in found if s))


def url_password(url: str) -> str | None:
    """The password of `scheme://user:password@host` as written (None when there is none)."""
    try:
        return urlsplit(url).password or None
    except ValueError:
        return None


def url_secrets(url: str) -> tuple[str, ...]:
    """The password of `scheme://user:password@host` and its HTTP Basic form, if any."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return ()
    if not password:
        return ()
    basic = base64.b64encode(f"{unquote(user or '')}:{unquote(password)}".encode()).decode()
    return tuple({password, unquote(password), basic})


def redact_secrets(value: Any) -> Any:
    """A copy of a JSON-like value with every secret-named key's value (unless None) replaced by
    "<redacted>", recursively, and secrets inside command strings and argv lists redacted."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if is_secret_key(str(k)) and v is not None else redact_secrets(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return _redact_argv([redact_secrets(v) for v in value])
    if isinstance(value, str):
        return redact_text(value)
    return value


def argv_secrets(argv: Sequence[str]) -> list[str]:
    """The values of secret-named flags in an argv list: `--api-key=X`, `--api-key X`, and the
    value of `NAME=X` when NAME names a secret; in order, without repeats."""
    found: list[str] = []
    for i, item in enumerate(argv):
        flag, eq, value = item.partition("=")
        if eq and value and is_secret_key(flag):
            found.append(value)
        elif (not eq and item.startswith("-") and is_secret_key(item) and i + 1 < len(argv)
              and argv[i + 1]):
            found.append(argv[i + 1])
    return list(dict.fromkeys(found))


def _redact_argv(items: list[Any]) -> list[Any]:
    """In an argv-like list, the element after a secret flag (`["--api-key", "X"]`)."""
    out = list(items)
    for i, item in enumerate(items[:-1]):
        if (isinstance(item, str) and item.startswith("-") and "=" not in item
                and is_secret_key(item) and isinstance(items[i + 1], str)):
            out[i + 1] = REDACTED
    return out
