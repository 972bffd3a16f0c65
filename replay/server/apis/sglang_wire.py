"""Which top-k form an SGLang release takes on the wire, chosen from the version it reports.

Releases differ in the keys `/generate` accepts for top-k logprobs as flat arrays (checked against
each release's own `GenerateReqInput`, io_struct.py, by tests/e2e/sglang_wire/):
- up to 0.5.16: no flat form at all (unknown keys are dropped by the HTTP server's model):
  nested lists `[[logprob, id, text], ...]` per position;
- 0.5.17 to 0.5.21: `return_flat_raw_top_logprobs` flattens the *input* (prompt) top-k only, and
  `return_flat_raw_top_logprobs_b64` without it is an HTTP 400 ("... requires
  return_flat_raw_top_logprobs."): the output top-k stays nested, so nested is what we ask;
- 0.5.22 and later: `return_flat_raw_output_top_logprobs` flattens the output top-k, and the b64
  flag may go with it alone: base64 float32/int32 arrays, exact and far cheaper to parse.
A server that reports no version (the embedded engine, an unknown fork) gets the newest form;
should it refuse that with a 400 that names a flat key, `fallback_for` says to resend nested. The
parser (`sglang_parse`) reads either form whatever was asked, so the choice only saves bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FLAT_OUTPUT_SINCE = (0, 5, 22)  # the first release with return_flat_raw_output_top_logprobs
FLAT_KEYS = ("return_flat_raw_output_top_logprobs", "return_flat_raw_top_logprobs_b64",
             "return_flat_raw_top_logprobs")


@dataclass(frozen=True)
class Wire:
    """How the bodies for one server ask for top-k: `flat_output` (0.5.22+) or nested."""

    flat_output: bool = True
    version: str | None = None  # as the server reported it; None: not reported
    reason: str = "the server reports no version: the newest form"

    def top_k_keys(self, top_k: int) -> dict[str, Any]:
        """The body keys that ask for the top-k form (none when no top-k is asked)."""
        if top_k > 0 and self.flat_output:
            return {"return_flat_raw_output_top_logprobs": True,
                    "return_flat_raw_top_logprobs_b64": True}
        return {}

    def describe(self) -> str:
        form = "flat base64 output top-k" if self.flat_output else "nested top-k lists"
        return f"{form} ({self.reason})"


NEWEST = Wire()
NESTED = Wire(flat_output=False, reason="forced")


def parse_version(text: Any) -> tuple[int, ...] | None:
    """The leading numeric release of a version string ("0.5.17.post1" -> (0, 5, 17)), or None
    when it has none."""
    if not isinstance(text, str):
        return None
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def wire_for(version: Any) -> Wire:
    """The form for a server reporting `version` (server_info's `version`; None if absent)."""
    release = parse_version(version)
    if release is None:
        return NEWEST
    reported = str(version)
    if release >= FLAT_OUTPUT_SINCE:
        return Wire(True, reported, f"SGLang {reported} flattens the output top-k")
    return Wire(False, reported, f"SGLang {reported} has no flat output top-k")


def fallback_for(body: dict[str, Any], status: int, text: str,
                 version: str | None = None) -> Wire | None:
    """The form to resend in after the server refused `body` with HTTP `status` and `text`:
    nested when the body asked for a flat form and the refusal names a flat key (a 400 comes
    before the request runs, so resending changes no cache); None when resending would not help.
    Judged on the refused body, not the adapter's current form: requests in flight together
    are refused together, and each is resent."""
    if status != 400 or not any(k in body for k in FLAT_KEYS) \
            or not any(k in text for k in FLAT_KEYS):
        return None
    return Wire(False, version, f"the server refused the flat form: {' '.join(text.split())[:120]}")
