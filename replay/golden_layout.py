"""What a golden directory holds: the schema names, the arrays and their data types, the
request table's columns, the codecs allowed. One description shared by the writer, the reader
and the checks (docs/golden-format.md is its prose form)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

SCHEMA_PREFIX = "golden-replay/golden/"
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_PREFIX}{SCHEMA_VERSION}"
READABLE_VERSIONS = (1,)

ZSTD_LEVEL = 9  # float32 mantissas barely compress; 19 gained nothing on a preset golden

# Columns of the `requests` table, in order.
REQUEST_COLUMNS = ("group", "branch", "turn", "parent", "max_new_tokens", "cached_tokens")

_INT32 = ("int32",)
_INT64 = ("int64",)
_FLOAT = ("float32", "float64")

# Every array a golden may hold and the data types each may have.
ARRAY_DTYPES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "prefix_tokens": _INT32,
    "prefix_offsets": _INT64,
    "requests": _INT32,
    "new_tokens": _INT32,
    "new_token_offsets": _INT64,
    "output_ids": _INT32,
    "output_offsets": _INT64,
    "logprobs": _FLOAT,
    "top_ids": _INT32,
    "top_logprobs": _FLOAT,
})
TOP_ARRAYS = ("top_ids", "top_logprobs")

# Codecs a golden's arrays may use. Anything else is refused before zarr instantiates it.
ALLOWED_BYTES_TO_BYTES = ("zstd",)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def expected_arrays(attrs: dict) -> list[str]:
    """The arrays a golden with these (vetted) root attributes must hold."""
    names = [n for n in ARRAY_DTYPES if n not in TOP_ARRAYS]
    return names + list(TOP_ARRAYS) if attrs["top_k"] > 0 else names
