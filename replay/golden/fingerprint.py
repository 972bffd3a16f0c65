"""What a golden or report says about where it came from: server, model, tool, platform."""

from __future__ import annotations

import math
import platform
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import replay
from replay.utils.redact import redact_secrets, redact_text


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


@dataclass(frozen=True)
class ModelIdentity:
    """What a server says about its model: the path it loaded (a local directory or a hub id),
    the name it serves under, the architectures and the weight version (/model_info, 0.5.23)."""

    path: str | None
    served_name: str | None = None
    architectures: tuple[str, ...] = ()
    weight_version: str | None = None

    @property
    def label(self) -> str | None:
        return self.path or self.served_name

    def names(self) -> set[str]:
        """The model's short names: the last component of the path and of the served name,
        lowercased; an HF cache path `.../models--ORG--NAME/snapshots/HASH` gives NAME."""
        found = set()
        for text in (self.path, self.served_name):
            if not text:
                continue
            parts = [p for p in text.replace("\\", "/").split("/") if p]
            for part in parts:
                if part.startswith("models--"):
                    found.add(part.split("--")[-1].lower())
                    break
            else:
                if parts:
                    found.add(parts[-1].lower())
        return found


def model_identity(model_info: dict[str, Any], server_info: dict[str, Any]) -> ModelIdentity:
    path = model_info.get("model_path") or server_info.get("model_path")
    served = model_info.get("served_model_name") or server_info.get("served_model_name")
    archs = model_info.get("architectures")
    version = model_info.get("weight_version") or server_info.get("weight_version")
    return ModelIdentity(
        path=str(path) if path else None,
        served_name=str(served) if served else None,
        architectures=tuple(str(a) for a in archs) if isinstance(archs, list) else (),
        weight_version=str(version) if version else None,
    )


def model_mismatch(recorded: ModelIdentity, serving: ModelIdentity) -> str | None:
    """Why the serving model is not the recorded one, or None when it is (or cannot be told).

    The same model under a local path and a hub id (`/data/Qwen3-8B` and `Qwen/Qwen3-8B`) shares
    its short name; architectures and weight versions, when both sides report them, must agree.
    """
    if recorded.label is None or serving.label is None:
        return None
    said = f"the server serves {serving.label!r} but the golden was recorded with {recorded.label!r}"
    if recorded.architectures and serving.architectures \
            and recorded.architectures != serving.architectures:
        return (f"{said}: architectures {list(serving.architectures)} vs "
                f"{list(recorded.architectures)}")
    if recorded.weight_version and serving.weight_version \
            and recorded.weight_version != serving.weight_version:
        return f"{said}: weight version {serving.weight_version!r} vs {recorded.weight_version!r}"
    if recorded.path == serving.path or recorded.names() & serving.names():
        return None
    return said


def vocab_size(model_info: dict[str, Any], server_info: dict[str, Any]) -> int | None:
    for info in (model_info, server_info):
        v = info.get("vocab_size")
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None

