"""What a golden directory holds: the schema names, the arrays and their data types, the
request table's columns, the codecs allowed. One description shared by the writer, the reader
and the checks (docs/golden-format.md is its prose form).

Two layouts exist; the `schema` attribute says which. Version 1 (the committed goldens) stores
every array as written in memory; version 2 (written since) stores the same golden nearer its
entropy: the top-1 entry that repeats the chosen token is stored once, the per-request lengths
live in the request table instead of offset arrays, and arrays are bit-shuffled before zstd.
Version 3 (`replay.golden.stream`, a golden too large for one chunk) is version 2 with every
array chunked along its first axis and its floats kept as float64, so that it can be written as
the recording goes. Readers turn any of them into the same logical arrays (the version-1 names)
before any check.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

SCHEMA_PREFIX = "golden-replay/golden/"
SCHEMA_VERSION = 2  # what the writer writes
SCHEMA = f"{SCHEMA_PREFIX}{SCHEMA_VERSION}"
CHUNKED_VERSION = 3  # what the streaming writer writes for a golden larger than one chunk
READABLE_VERSIONS = (1, 2, 3)

ZSTD_LEVEL = 9  # float32 mantissas barely compress; 19 gained nothing on a preset golden

# Columns of the `requests` table, in order, per layout version.
REQUEST_COLUMNS_V1 = ("group", "branch", "turn", "parent", "max_new_tokens", "cached_tokens")
REQUEST_COLUMNS_V2 = REQUEST_COLUMNS_V1 + ("num_retractions", "new_token_count", "output_count")
REQUEST_COLUMNS = REQUEST_COLUMNS_V1  # the logical table every check and reader works on

_INT32 = ("int32",)
_INT64 = ("int64",)
_FLOAT = ("float32", "float64")

# Every array a golden of either layout may hold and the data types each may have.
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
    "top_ids_rest": _INT32,
    "top_logprobs_rest": _FLOAT,
    "prompt_logprobs": _FLOAT,
})
# Optional in either layout: the prompt logprobs of goldens recorded with `prompt_logprobs = 1`,
# present exactly when the root attribute of the same name is (its `starts` and `counts`).
PROMPT_ARRAY = "prompt_logprobs"
TOP_ARRAYS = ("top_ids", "top_logprobs")  # logical names (and version 1's stored ones)

_STORED = {
    1: (("prefix_tokens", "prefix_offsets", "requests", "new_tokens", "new_token_offsets",
         "output_ids", "output_offsets", "logprobs"), TOP_ARRAYS),
    2: (("prefix_tokens", "requests", "new_tokens", "output_ids", "logprobs"),
        ("top_ids_rest", "top_logprobs_rest")),
}
_STORED[3] = _STORED[2]

# Codecs a golden's arrays may use after `bytes`. Anything else is refused before zarr
# instantiates it. Version 1 writes zstd, version 2 blosc (zstd inside, bit shuffle).
ALLOWED_BYTES_TO_BYTES = ("zstd", "blosc")
BLOSC_CONFIG = {"cname": "zstd", "clevel": ZSTD_LEVEL, "shuffle": "bitshuffle", "blocksize": 0}

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def request_columns(version: int) -> tuple[str, ...]:
    return REQUEST_COLUMNS_V2 if version >= 2 else REQUEST_COLUMNS_V1


def expected_arrays(attrs: dict, version: int) -> list[str]:
    """The arrays a golden of this layout with these (vetted) root attributes must hold."""
    base, top = _STORED[version]
    names = list(base) + list(top) if attrs["top_k"] > 0 else list(base)
    return names + [PROMPT_ARRAY] if PROMPT_ARRAY in attrs else names
