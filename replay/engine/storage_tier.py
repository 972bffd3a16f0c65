"""The storage tier ("file" backend): pages the host pool evicts, as .npy files in a directory.

A file is named by the page's chain hash (every token from the start of the sequence to the
page's end), like SGLang's L3 keys: the same prefix always maps to the same name. A page's SSM
checkpoint, if any, goes beside it. Capacity is unbounded; /flush_cache empties the directory.

A directory given by the user (`--storage-dir`) may be shared by several engines (the workers of
a topology behind a router, docs/topologies.md): files are written atomically (a reader never sees
a torn page, the KV file last so its presence means the page is whole), every page backed up to
host is written through to storage at once (so a worker finds its sibling's prefix as soon as
that request finished, as a write-through L3 backend offers it), a worker finds pages
another worker stored (`RadixCache` looks prefixes up by hash, as SGLang's L3 prefetch does), and
eviction never deletes a shared file another worker may be about to read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

SSMArrays = list[tuple[np.ndarray, np.ndarray]]


class FileStorage:
    def __init__(self, directory: str | None, *, shared: bool = False) -> None:
        self._owned = directory is None  # a private temp dir is removed on close
        self._shared = shared and directory is not None
        self.root = Path(directory or tempfile.mkdtemp(prefix="golden-engine-storage-"))
        self.root.mkdir(parents=True, exist_ok=True)

    @property
    def shared(self) -> bool:
        """A directory given with `--storage-dir`: other engines may read and write it."""
        return self._shared

    def _path(self, key: str, part: str) -> Path:
        return self.root / f"{key}.{part}.npy"

    def save(self, key: str, page: np.ndarray, ssm: SSMArrays | None) -> None:
        if ssm is not None:
            self._write(key, "conv", np.stack([conv for conv, _ in ssm]))
            self._write(key, "h", np.stack([h for _, h in ssm]))
        self._write(key, "kv", page)

    def _write(self, key: str, part: str, array: np.ndarray) -> None:
        final = self._path(key, part)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.save(f, array)
        os.replace(tmp, final)

    def has(self, key: str) -> bool:
        return self._path(key, "kv").exists()

    def load(self, key: str) -> np.ndarray:
        return np.load(self._path(key, "kv"))

    def has_ssm(self, key: str) -> bool:
        return self._path(key, "h").exists()

    def load_ssm(self, key: str) -> SSMArrays:
        conv, h = np.load(self._path(key, "conv")), np.load(self._path(key, "h"))
        return list(zip(conv, h))

    def delete(self, key: str) -> None:
        if self._shared:  # another engine may hold this page in its tree
            return
        for part in ("kv", "conv", "h"):
            self._path(key, part).unlink(missing_ok=True)

    def clear(self) -> None:
        for path in self.root.glob("*.npy"):  # a shared one: another engine may be clearing it too
            path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)
