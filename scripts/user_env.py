"""What scripts/install_sglang.sh needs to know about the environment golden-replay was installed
into (run by that environment's interpreter; standard library only).

`python scripts/user_env.py pth`: a .pth file's lines that add its site directories to another
interpreter (`site.addsitedir`, so the .pth files there, editable installs among them, work too),
in its own import order: a venv's site-packages first, then (made with --system-site-packages)
the base's.
`python scripts/user_env.py fingerprint`: one line that changes whenever that environment does:
its prefix and a hash of every installed distribution's name and version.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import site
import sys
from pathlib import Path


def site_dirs() -> list[str]:
    dirs = [d for d in site.getsitepackages() if Path(d).is_dir()]
    if site.ENABLE_USER_SITE and Path(site.getusersitepackages()).is_dir():
        dirs.insert(0, site.getusersitepackages())  # `pip install --user` wins, as in site.py
    return dirs


def fingerprint() -> str:
    names = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                    if d.metadata["Name"]})
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    return f"env={sys.prefix} dists={len(names)}:{digest}"


if __name__ == "__main__":
    if sys.argv[1:] == ["pth"]:
        print("\n".join(f"import site; site.addsitedir({d!r})" for d in site_dirs()))
    elif sys.argv[1:] == ["fingerprint"]:
        print(fingerprint())
    else:
        sys.exit("usage: python scripts/user_env.py pth|fingerprint")
