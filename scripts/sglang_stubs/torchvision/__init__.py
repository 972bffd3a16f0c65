"""A stand-in for torchvision inside golden-replay's SGLang environment (scripts/install_sglang.sh).

SGLang 0.5.23 imports torchvision at import time only because `sglang.srt.configs` pulls in the
configs of vision models (e.g. nano_nemotron_vl -> internvl_utils); torchvision is used only to
preprocess images. The front end serves a text-only model, so no image path ever runs, and the
torchvision wheel on PyPI cannot load beside the CPU torch build ("operator torchvision::nms does
not exist"). Every `torchvision.*` module therefore resolves to a stub whose attributes are
placeholders: importing works, any use raises, so an image request fails loudly instead of being
processed wrongly.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, NoReturn

__version__ = "0.0.0+golden-replay-stub"
MESSAGE = ("torchvision is a stub in golden-replay's SGLang environment: image inputs are not "
           "supported (scripts/install_sglang.sh)")


class Unavailable:
    """A placeholder for anything taken from torchvision: any further name is another placeholder
    (so `InterpolationMode.BICUBIC` in a default argument still imports); calling one raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> "Unavailable":
        if name.startswith("__"):
            raise AttributeError(name)
        return Unavailable(f"{self._name}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError(f"{MESSAGE}; {self._name} was called")

    def __repr__(self) -> str:
        return f"<unavailable {self._name}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Unavailable:
        if name.startswith("__"):
            raise AttributeError(name)
        return Unavailable(f"{self.__name__}.{name}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves every torchvision submodule to a _StubModule."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def __getattr__(name: str) -> Unavailable:
    if name.startswith("__"):
        raise AttributeError(name)
    return Unavailable(f"{__name__}.{name}")


sys.meta_path.append(_StubFinder())
