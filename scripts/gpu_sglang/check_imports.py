#!/usr/bin/env python3
"""Offline check that the carry is complete: SGLang 0.5.17's server modules (self_check.py's list)
import on a CPU machine from the carried wheels plus stand-ins for the H200 image's packages, and
nothing else.

How (the method of the GPU feasibility run): run with the stand-in venv's Python
(make_standin_env.sh: only distributions on device_packages.txt, the image's versions) and the
carry installed in SITE (install_on_device.sh does that here too). CUDA is faked where SGLang asks
at import (torch.cuda.is_available, capability 9.0, device properties of an H200), so SGLang takes
its CUDA import paths; sgl_kernel's native libraries, which need the GPU driver (libcuda.so.1),
are replaced by empty modules only after step 1 showed where the real ones stop.

1. ``import sgl_kernel`` for real (capability faked): it must get as far as loading
   ``sm90/common_ops.abi3.so`` and stop there on a missing CUDA driver library, never on a missing
   Python module.
2. The server modules import (self_check.py's SERVER_MODULES, plus the fa3 backend when
   flash_ops.abi3.so is carried).
3. Every module imported comes from a carried wheel, a distribution on the device's list, or the
   standard library; the venv holds nothing else. Carried wheels nothing imported are listed.

Prints ``check_imports: ok ...`` or ``check_imports: FAILED ...`` (exit status 1) last.
usage: check_imports.py SITE
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata as md
import re
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEVICE_LIST = HERE / "device_packages.txt"
REPO = HERE.parents[1]
NATIVE = ("sgl_kernel.flash_ops", "sgl_kernel.spatial_ops", "sgl_kernel.flashmla_ops")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def device_names() -> set[str]:
    lines = DEVICE_LIST.read_text().splitlines()
    return {norm(line.split()[0]) for line in lines if line.strip() and not line.startswith("#")}


def fake_cuda() -> None:
    """What SGLang asks torch.cuda at import, answered as an H200 would."""
    import torch

    props = types.SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, total_memory=143771 << 20,
        multi_processor_count=132, L2_cache_size=60 << 20, warp_size=32, gcnArchName="",
        regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048,
        shared_memory_per_block_optin=232448, uuid="fake-h200", is_integrated=False)
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.set_device = lambda device: None
    cuda.get_device_capability = lambda device=None: (9, 0)
    cuda.get_device_name = lambda device=None: props.name
    cuda.get_device_properties = lambda device=None: props
    cuda.mem_get_info = lambda device=None: (140 << 30, props.total_memory)
    cuda.is_bf16_supported = lambda *a, **k: True


class FakeNativeFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """sgl_kernel's GPU libraries as empty modules, where the carried wheel has the file: on the
    device they load; here the driver they link (libcuda.so.1) is missing."""

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001
        if fullname not in NATIVE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:  # not carried: fail as on the device
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=spec.origin)

    def create_module(self, spec):  # noqa: ANN001
        return None

    def exec_module(self, module) -> None:  # noqa: ANN001
        pass


def fake_sgl_kernel_ops(site: Path) -> None:
    """``sgl_kernel.load_utils._load_architecture_specific_ops`` loads sm90/common_ops.abi3.so
    (step 1 showed it stops on libcuda.so.1): here it returns an empty module instead. The carried
    load_utils.py is loaded first, patched, and registered, so sgl_kernel/__init__ imports it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sgl_kernel.load_utils",
                                                  site / "sgl_kernel" / "load_utils.py")
    load_utils = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(load_utils)  # type: ignore[union-attr]
    load_utils._load_architecture_specific_ops = lambda: types.ModuleType("common_ops")
    sys.modules["sgl_kernel.load_utils"] = load_utils


def fake_h200(site: Path) -> None:
    """Everything faked for importing SGLang here as on the H200 (steps 2 and 3; check_models.py)."""
    fake_cuda()
    sys.meta_path.insert(0, FakeNativeFinder())
    fake_sgl_kernel_ops(site)


def step1_real_sgl_kernel(site: Path) -> tuple[bool, str]:
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import check_imports as c; "
            "c.fake_cuda(); import sgl_kernel")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, timeout=600)
    text = out.stderr.strip().splitlines()
    frames = [line.strip() for line in text if line.strip().startswith("File ")]
    # load_utils lists each attempt's error: the sm90 library's first, then the fallbacks'
    attempts = [line.strip() for line in text if line.startswith("- ") and "Error" in line]
    tried = [line.strip() for line in text if "found files:" in line]
    print(f"step 1: import sgl_kernel (real, capability 9.0): exit {out.returncode}")
    for line in frames[-2:] + tried + attempts:
        print("  ", line)
    if out.returncode == 0:
        return True, "sgl_kernel imported (a GPU driver is present?)"
    first = attempts[0] if attempts else (text[-1] if text else "(no error)")
    ok = "sm90/common_ops.abi3.so" in " ".join(tried) and bool(
        re.search(r"lib(cuda|cudart|nvrtc|cublas)\S*\.so\S*: cannot open shared object", first))
    return ok, ("got to sm90/common_ops.abi3.so and stopped on a CUDA driver library, as "
                "expected without a GPU; no Python module missing" if ok
                else "stops on something else: " + first)


def owners() -> dict[str, str]:
    """Every installed file -> the distribution that installed it (from RECORD)."""
    out: dict[str, str] = {}
    for dist in md.distributions():
        for f in dist.files or []:
            out[str(Path(dist.locate_file(f)).resolve())] = norm(dist.metadata["Name"])
    return out


def step3_audit(site: Path, carried: set[str], device: set[str]) -> tuple[list[str], set[str], set[str]]:
    """(problems, carried dists used, device dists used)."""
    stdlib = {str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("stdlib", "platstdlib")}
    own, problems, used_carried, used_device = owners(), [], set(), set()
    site_r = str(site.resolve())
    for name, module in sorted(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or not Path(file).is_absolute() or name in {"__main__", "__mp_main__"} \
                or name.split(".")[0] in {"check_imports", "self_check"}:
            continue  # torch.ops/torch.classes have a relative __file__
        path = str(Path(file).resolve())
        if path.startswith(str(REPO) + "/"):
            continue  # golden-replay itself travels as the working tree
        if path.startswith(str(site / "IPython")):
            continue  # the carried stub (stubs/IPython), no distribution
        dist = own.get(path)
        if "/_vendor/" in path:  # setuptools' vendored jaraco, more_itertools ...: setuptools's
            dist = own.get(path.split("/_vendor/")[0] + "/__init__.py", dist)
        if dist is None:
            if not any(path.startswith(s) and "site-packages" not in path for s in stdlib):
                problems.append(f"{name} ({path}) belongs to no distribution")
            continue
        if path.startswith(site_r):
            if dist in carried:
                used_carried.add(dist)
            else:
                problems.append(f"{name}: {dist} in SITE but not carried")
        elif dist in device:
            used_device.add(dist)
        else:
            problems.append(f"{name}: from {dist}, which the device does not have")
    return problems, used_carried, used_device


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    site = Path(argv[0]).resolve()
    sys.path.insert(0, str(site))
    sys.path.insert(0, str(HERE))
    device = device_names()
    carried = {norm(md.PathDistribution(p).metadata["Name"]) for p in site.glob("*.dist-info")}
    venv_extra = sorted({norm(d.metadata["Name"]) for d in md.distributions()
                         if not str(d.locate_file("")).startswith(str(site))} - device)
    problems = [f"the stand-in venv holds {venv_extra}, which the device lacks"] if venv_extra else []

    ok1, why1 = step1_real_sgl_kernel(site)
    print("  ->", why1)
    if not ok1:
        problems.append(f"step 1: {why1}")

    import self_check

    fake_h200(site)
    print("step 2: server modules, CUDA faked")
    modules = self_check.modules_to_import()
    failures = self_check.import_all(modules)
    problems += [f"import {f}" for f in failures]

    audit, used_carried, used_device = step3_audit(site, carried, device)
    problems += audit
    unused = sorted(carried - used_carried)
    print(f"step 3: modules from {len(used_carried)} of {len(carried)} carried distributions and "
          f"{len(used_device)} of the device's; carried but not imported: {unused or 'none'}")
    print("  device distributions imported:", " ".join(sorted(used_device)))
    if problems:
        print("check_imports: FAILED: " + " | ".join(problems))
        return 1
    print(f"check_imports: ok ({len(modules)} modules; {len(used_carried)} carried and "
          f"{len(used_device)} device distributions imported)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
