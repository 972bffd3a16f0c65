"""JSON text <-> Python objects for everything the client sends and receives.

msgspec, chosen by measurement on this project's 2-core machine (docs/benchmarks.md,
`scripts/bench_parse.py`): its typed decoding validates an SGLang answer's types in C while it
decodes (the `sglang` adapter's fast path), which beat orjson followed by Python type checks by
about 1.5x at top-0; untyped it decodes 2-3x faster than the standard library. Both decode
floats exactly (correctly rounded), which is all a golden needs.

What msgspec refuses goes to the standard library, which also reads the non-standard
NaN/Infinity literals some servers write, so exactly the same answers are accepted as before.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from replay.utils.errors import MalformedResponse

_ENCODER = msgspec.json.Encoder()


def encode(obj: Any) -> str:
    """Request bodies as JSON text (they hold only plain ints, strings and bools)."""
    return _ENCODER.encode(obj).decode()


def too_deep(what: str) -> MalformedResponse:
    return MalformedResponse(f"{what}: response is not usable JSON (nested too deeply)")


def decode(text: str | bytes, what: str) -> Any:
    """JSON text to Python objects; MalformedResponse naming `what` when it is not JSON."""
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    except RecursionError:
        raise too_deep(what) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedResponse(f"{what}: response is not JSON ({exc.msg} at {exc.pos})") from None
    except (ValueError, RecursionError) as exc:  # bad UTF-8, thousands of digits, deep nesting
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise MalformedResponse(f"{what}: response is not usable JSON ({reason})") from None
