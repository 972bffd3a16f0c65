"""`run`: asyncio.run for coroutines whose result is large.

When asyncio.run finishes on the main thread it restores the SIGINT handler, and the standard
library formats the repr of the previous handler, which holds the finished main task, whose repr
holds its result. For a golden or a replay result full of numpy arrays that repr took 1.2-1.7 s
per call (measured with cProfile on hicache-branching). Here the main task returns None and the
result travels beside it.

An interrupt (Ctrl-C, or SIGTERM and SIGHUP, which the CLI turns into KeyboardInterrupt) raised
while a task runs its step is kept on that task as well as raised to the caller; when the task
was collected, asyncio logged it again ("Task exception was never retrieved", a traceback after
golden's one-line error). The caller reports an interrupt once, so such a task's copy is not
logged; any other task's error still is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    box: list[T] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(_interrupts_reported_once)
        box.append(await coro)

    asyncio.run(main())
    return box[0]


def _interrupts_reported_once(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if isinstance(context.get("exception"), KeyboardInterrupt):
        return  # raised to run()'s caller, which reports it
    loop.default_exception_handler(context)
