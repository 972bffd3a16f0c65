"""Errors that end a run with exit code 2: the tool could not reach a verdict.

An error is never a pass and never a fail. Every message is one line a user can act on.
"""

from typing import Any


class GoldenError(Exception):
    """Base class: anything that prevents a verdict (exit code 2)."""


class UsageError(GoldenError):
    """Bad arguments or a bad scenario file."""


class GoldenFormatError(GoldenError):
    """A golden that cannot be read: missing, corrupt, wrong schema, failed checksum."""


class ServerError(GoldenError):
    """The server is unreachable or kept answering errors after bounded retries."""


class RefusedRequest(ServerError):
    """The server answered a request with an HTTP error status (after the transport's retries):
    `status` and the answer's `text` (scrubbed), for adapters that can resend in another form."""

    def __init__(self, message: str, status: int, text: str) -> None:
        super().__init__(message)
        self.status = status
        self.text = text


class MalformedResponse(GoldenError):
    """The server answered, but not in the shape the protocol promises."""


class ModelMismatch(GoldenError):
    """The server serves a different model than the golden was recorded with."""


class NumericsMismatch(GoldenError):
    """The replay server runs other arithmetic than the reference (replay/judge/numerics.py).
    `numerics` is the report's `numerics` object (docs/report.md), for the error report."""

    def __init__(self, message: str, numerics: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.numerics = numerics
