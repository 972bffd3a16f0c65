"""What a golden or report says about where it came from: server, model, tool, platform."""

from __future__ import annotations

import math
import platform
import sys
from datetime import datetime, timezone
from typing import Any

import replay
from replay.redact import redact_secrets, redact_text


def redact_url(url: str) -> str:
    """The URL without `user:password@`."""
    return redact_text(url)


def platform_fingerprint() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "processor": platform.processor(),
    }


def source_meta(url: str, server_info: dict[str, Any], model_info: dict[str, Any],
                api: str = "sglang", flush: str | None = None) -> dict[str, Any]:
    """Golden/report metadata for one server (`flush`: how the API's adapter empties its cache)."""
    return {
        "server_url": redact_url(url),
        "api": api,
        "flush": flush,
        "server_info": json_safe(redact_secrets(server_info)),
        "model_info": json_safe(redact_secrets(model_info)),
        "tool": f"golden-replay {replay.__version__}",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "platform": platform_fingerprint(),
    }


def json_safe(value: Any) -> Any:
    """A copy in which non-finite floats (a server's `NaN` or `Infinity` literals, or 1e999)
    become strings: strict JSON, as reports and goldens are written, has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def model_identity(model_info: dict[str, Any], server_info: dict[str, Any]) -> str | None:
    path = model_info.get("model_path") or server_info.get("model_path")
    return str(path) if path else None


def vocab_size(model_info: dict[str, Any], server_info: dict[str, Any]) -> int | None:
    for info in (model_info, server_info):
        v = info.get("vocab_size")
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None
