"""`aio.run`: asyncio.run for the client, whose result travels beside the main task."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from replay.utils import aio


def test_the_coroutines_result_is_returned():
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert aio.run(answer()) == 42


def test_an_interrupt_raised_inside_a_task_reaches_the_caller_once_and_is_not_logged_at_exit(
        caplog):
    # SIGTERM's handler (cli/options.py) raises where the main thread is, often inside a task's
    # step: asyncio then keeps the interrupt on that task too, and logged it when the task was
    # collected ("Task exception was never retrieved"), after golden's one-line error.
    async def interrupted() -> None:
        await asyncio.sleep(0)
        raise KeyboardInterrupt("SIGTERM")

    async def replay() -> None:
        await asyncio.gather(interrupted(), asyncio.sleep(10))

    caplog.set_level(logging.ERROR, logger="asyncio")
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        aio.run(replay())
    gc.collect()
    assert "never retrieved" not in caplog.text


def test_an_error_of_a_forgotten_task_is_still_logged(caplog):
    async def failing() -> None:
        raise ValueError("lost")

    async def main() -> None:
        asyncio.get_running_loop().create_task(failing())
        await asyncio.sleep(0.01)

    caplog.set_level(logging.ERROR, logger="asyncio")
    aio.run(main())
    gc.collect()
    assert "never retrieved" in caplog.text and "lost" in caplog.text
