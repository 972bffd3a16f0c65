#!/usr/bin/env python3
"""Print the one wheel file in a folder for each ``NAME==VERSION`` pin, in the pins' order.

Why: build_carry.sh's download folder is a cache that may hold other versions from earlier pins;
the carry must hold exactly the pinned ones (two versions of one package stop the whole
``pip install`` on the device). Exit status 1, naming the pin, when a pin has no wheel or several.

usage: pick_wheels.py DIR NAME==VERSION...
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pick(folder: Path, pins: list[str]) -> list[Path]:
    by_key: dict[tuple[str, str], list[Path]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        by_key.setdefault((normalized(name), version), []).append(wheel)
    picked, problems = [], []
    for pin in pins:
        name, _, version = pin.partition("==")
        found = by_key.get((normalized(name), version), [])
        if len(found) != 1:
            problems.append(f"{pin}: {len(found)} wheels ({', '.join(p.name for p in found) or 'none'})")
        else:
            picked.append(found[0])
    if problems:
        raise SystemExit("pick_wheels: " + "; ".join(problems))
    return picked


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any("==" not in a for a in argv[1:]):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for wheel in pick(Path(argv[0]), argv[1:]):
        print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
