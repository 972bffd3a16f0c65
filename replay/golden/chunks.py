"""One stored array of a golden, read one chunk at a time from the bytes on disk.

A replay must not hold a whole golden (a nightly one has 100k requests), so a stored array is
read chunk by chunk: `ChunkedArray.rows(a, b)` decodes only the chunks that hold rows [a, b) and
keeps the last few decoded. Every array's metadata has been vetted (`checks.vet_array_metadata`:
little-endian bytes, then zstd or blosc, a regular grid of whole rows, default chunk keys) before
one is built, so decoding is exactly what zarr does for that subset, done here on the very bytes
read: `scan` (the verification pass) hashes the array as `checks.array_sha256` defines it and
takes a digest of each chunk file; a later read of the same chunk must give the same digest, so
a golden replaced (`golden update`'s rename) or altered while a replay reads it is an error,
never a mix of two goldens.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numcodecs import Blosc, Zstd

from replay.golden.checks import Unreadable, check_blosc_chunk, first_line
from replay.golden.limits import zstd_content_size

KEEP_CHUNKS = 2  # decoded chunks held per array by default: a request's rows may span two


@dataclass(frozen=True)
class ArraySpec:
    """What the vetted metadata says of one stored array."""

    name: str
    dtype: np.dtype  # little-endian
    shape: tuple[int, ...]
    chunk_rows: int  # rows per chunk (a chunk holds whole rows)
    compressor: str  # "blosc" or "zstd"
    files: tuple[Path, ...]  # one per chunk, in row order

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return (self.chunk_rows, *(max(1, n) for n in self.shape[1:]))

    @property
    def chunk_nbytes(self) -> int:
        return int(np.prod(self.chunk_shape)) * self.dtype.itemsize


class ChunkedArray:
    """Rows of one stored array, decoded chunk by chunk (at most `keep` chunks held)."""

    def __init__(self, spec: ArraySpec, digests: list[bytes] | None = None,
                 keep: int = KEEP_CHUNKS) -> None:
        self.spec = spec
        self.digests = digests  # of each chunk file's bytes, from `scan`; None: not checked
        self.keep = keep
        self._held: OrderedDict[int, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return self.spec.shape[0] if self.spec.shape else 0

    def scan(self) -> Iterator[np.ndarray]:
        """Every chunk's rows in order, each decoded once; afterwards `sha256` is the array's
        checksum and later reads are held to the digests taken here."""
        h = hashlib.sha256(f"{self.spec.dtype.name};{','.join(map(str, self.spec.shape))};"
                           .encode("ascii"))
        digests = []
        for c in range(len(self.spec.files)):
            raw = _read(self.spec.files[c])
            digests.append(hashlib.sha256(raw).digest())
            rows = self._decode(c, raw)
            h.update(np.ascontiguousarray(rows).tobytes())
            yield rows
        self.sha256 = h.hexdigest()
        self.digests = digests

    def whole(self) -> np.ndarray:
        """Every row, in an array of its own (a small array: the request table, an offsets
        array), read without keeping any chunk (a padded chunk may be far larger)."""
        if 0 in self.spec.shape[1:] or not self.spec.files:
            return np.zeros(self.spec.shape, dtype=self.spec.dtype.newbyteorder("="))
        return np.concatenate([self._load(c) for c in range(len(self.spec.files))])

    def rows(self, a: int, b: int) -> np.ndarray:
        """Rows [a, b), read-only, in an array of their own: never a view into a chunk, which
        would keep the whole chunk alive after it is dropped (a replay's requests in flight
        then pinned dozens of copies of a chunk they read in turn: 13 MB more at 32k requests)."""
        if b <= a or 0 in self.spec.shape[1:]:  # nothing stored (a width of 0 has no chunks)
            return np.zeros((max(b - a, 0), *self.spec.shape[1:]),
                            dtype=self.spec.dtype.newbyteorder("="))
        n = self.spec.chunk_rows
        first, last = a // n, (b - 1) // n
        if first == last:
            out = self.chunk(first)[a - first * n:b - first * n].copy()
        else:
            out = np.concatenate([self.chunk(c)[max(a - c * n, 0):min(b - c * n, n)]
                                  for c in range(first, last + 1)])
        out.flags.writeable = False
        return out

    def chunk(self, c: int) -> np.ndarray:
        held = self._held.get(c)
        if held is not None:
            self._held.move_to_end(c)
            return held
        rows = self._load(c)
        self._held[c] = rows
        while len(self._held) > self.keep:
            self._held.popitem(last=False)
        return rows

    def _load(self, c: int) -> np.ndarray:
        """Chunk c read and decoded, held to the digest `scan` took of it."""
        raw = _read(self.spec.files[c])
        if self.digests is not None and hashlib.sha256(raw).digest() != self.digests[c]:
            raise Unreadable(f"array {self.spec.name}: chunk {c} changed while the golden was "
                             "read (replaced or altered: read it again)")
        return self._decode(c, raw)

    def _decode(self, c: int, raw: bytes) -> np.ndarray:
        spec = self.spec
        if spec.compressor == "blosc":
            check_blosc_chunk(raw, spec.chunk_nbytes)
            codec: Blosc | Zstd = Blosc()
        else:
            size = zstd_content_size(raw[:18])
            if size != spec.chunk_nbytes:
                raise Unreadable(f"unreadable chunk (zstd frame of {size} bytes, expected "
                                 f"{spec.chunk_nbytes})")
            codec = Zstd()
        try:
            data = codec.decode(raw)
        except Exception as exc:  # noqa: BLE001 - codecs raise many types on corrupt chunks
            raise Unreadable(f"unreadable chunk ({type(exc).__name__}: {first_line(exc)})") from None
        if len(data) != spec.chunk_nbytes:
            raise Unreadable(f"unreadable chunk (decoded {len(data)} bytes, expected "
                             f"{spec.chunk_nbytes})")
        rows = np.frombuffer(data, dtype=spec.dtype).reshape(spec.chunk_shape)
        rows = rows[:min(spec.chunk_rows, spec.shape[0] - c * spec.chunk_rows)]
        native = rows.astype(spec.dtype.newbyteorder("="), copy=False)
        native.flags.writeable = False  # shared by every request read from it
        return native


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise Unreadable(f"unreadable chunk ({exc.strerror or exc})") from None
