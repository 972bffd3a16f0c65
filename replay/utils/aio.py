"""`run`: asyncio.run for coroutines whose result is large.

When asyncio.run finishes on the main thread it restores the SIGINT handler, and the standard
library formats the repr of the previous handler, which holds the finished main task, whose repr
holds its result. For a golden or a replay result full of numpy arrays that repr took 1.2-1.7 s
per call (measured with cProfile on hicache-branching). Here the main task returns None and the
result travels beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    box: list[T] = []

    async def main() -> None:
        box.append(await coro)

    asyncio.run(main())
    return box[0]
