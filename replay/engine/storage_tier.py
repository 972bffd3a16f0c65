"""The storage tier ("file" backend): pages the host pool evicts, as .npy files in a directory.

A file is named by the page's chain hash (every token from the start of the sequence to the
page's end), like SGLang's L3 keys: the same prefix always maps to the same name. A page's SSM
checkpoint, if any, goes beside it. Capacity is unbounded; /flush_cache empties the directory.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

SSMArrays = list[tuple[np.ndarray, np.ndarray]]


class FileStorage:
    def __init__(self, directory: str | None) -> None:
        self._owned = directory is None  # a private temp dir is removed on close
        self.root = Path(directory or tempfile.mkdtemp(prefix="golden-engine-storage-"))
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str, part: str) -> Path:
        return self.root / f"{key}.{part}.npy"

    def save(self, key: str, page: np.ndarray, ssm: SSMArrays | None) -> None:
        np.save(self._path(key, "kv"), page)
        if ssm is not None:
            np.save(self._path(key, "conv"), np.stack([conv for conv, _ in ssm]))
            np.save(self._path(key, "h"), np.stack([h for _, h in ssm]))

    def load(self, key: str) -> np.ndarray:
        return np.load(self._path(key, "kv"))

    def has_ssm(self, key: str) -> bool:
        return self._path(key, "h").exists()

    def load_ssm(self, key: str) -> SSMArrays:
        conv, h = np.load(self._path(key, "conv")), np.load(self._path(key, "h"))
        return list(zip(conv, h))

    def delete(self, key: str) -> None:
        for part in ("kv", "conv", "h"):
            self._path(key, part).unlink(missing_ok=True)

    def clear(self) -> None:
        for path in self.root.glob("*.npy"):
            path.unlink()

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)
