"""What a golden or report says about where it came from: server, model, tool, platform."""

from __future__ import annotations

import platform
import re
import sys
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import replay

REDACTED = "<redacted>"
_SECRET_KEY = re.compile(
    r"(api[_-]?key|apikey|secret|password|passwd|authorization|auth[_-]?token|access[_-]?token"
    r"|hf[_-]?token|bearer|credential|private[_-]?key)",
    re.IGNORECASE,
)
_SECRET_FLAG = re.compile(
    r"(--?(?:api[_-]?key|admin[_-]?api[_-]?key|token|hf[_-]?token|password|secret)[= ])(\S+)",
    re.IGNORECASE,
)


def redact(value: Any) -> Any:
    """A copy with secret-looking keys and `--api-key X` style flag values replaced."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and _SECRET_KEY.search(k) and v is not None else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return _SECRET_FLAG.sub(lambda m: m.group(1) + REDACTED, value)
    return value


def redact_url(url: str) -> str:
    """Drop user:password@ from a URL."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return url


def platform_fingerprint() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "processor": platform.processor(),
    }


def source_meta(url: str, server_info: dict[str, Any], model_info: dict[str, Any],
                api: str = "sglang") -> dict[str, Any]:
    """Golden/report metadata for one server."""
    return {
        "server_url": redact_url(url),
        "api": api,
        "server_info": redact(server_info),
        "model_info": redact(model_info),
        "tool": f"golden-replay {replay.__version__}",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "platform": platform_fingerprint(),
    }


def model_identity(model_info: dict[str, Any], server_info: dict[str, Any]) -> str | None:
    path = model_info.get("model_path") or server_info.get("model_path")
    return str(path) if path else None


def vocab_size(model_info: dict[str, Any], server_info: dict[str, Any]) -> int | None:
    for info in (model_info, server_info):
        v = info.get("vocab_size")
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None
