"""Checks of a server's own settings that would make its answers mean something else.

- `check_sampling_defaults`: SGLang merges a server-wide `preferred_sampling_params` (from
  /model_info) under every request's `sampling_params` (`{**preferred, **request}`). Our explicit
  keys win, but any other key (a repetition penalty, a min_p...) silently changes greedy outputs.
  Sending explicit neutral values for every possible key would depend on the server's version
  and would be refused by servers whose contract gate rejects keys it does not know; so the tool
  refuses (exit 2) a server whose preferred parameters set anything it does not override itself.
"""

from __future__ import annotations

from typing import Any

from replay.utils.errors import ServerError


def check_sampling_defaults(model_info: dict[str, Any], sent: dict[str, Any]) -> None:
    """ServerError naming each server-wide sampling default that our requests do not override."""
    preferred = model_info.get("preferred_sampling_params")
    if not preferred:
        return
    if not isinstance(preferred, dict):
        raise ServerError(f"/model_info: preferred_sampling_params is {preferred!r}, not an object")
    extra = {k: v for k, v in preferred.items() if k not in sent}
    if extra:
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(extra.items()))
        raise ServerError(f"the server merges preferred_sampling_params into every request and "
                          f"they would change its outputs ({shown}): restart it without "
                          "--preferred-sampling-params")
