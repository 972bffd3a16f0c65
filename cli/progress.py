"""Progress of a long run on stderr: a live bar on a terminal, plain lines in a pipe or CI log.

A plain line comes every tenth of the run or every `every_s` seconds, whichever is first, and at
the end: `replay x.zarr: 27/54 done, 1 failed, 12 s elapsed, ETA 12 s`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

Clock = Callable[[], float]
Write = Callable[[str], None]


@dataclass
class ProgressLines:
    label: str
    total: int
    write: Write
    every_s: float = 30.0
    clock: Clock = time.monotonic
    done: int = 0
    failed: int = 0
    started: float = field(default=0.0, init=False)
    last_line: float = field(default=0.0, init=False)
    last_done: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.started = self.last_line = self.clock()
        self.step = max(1, self.total // 10)

    def tick(self, _request: str, failed: bool = False) -> None:
        self.done += 1
        self.failed += int(failed)
        now = self.clock()
        if (self.done - self.last_done >= self.step or now - self.last_line >= self.every_s
                or self.done == self.total):
            self.write(self.line(now))
            self.last_line, self.last_done = now, self.done

    def finish(self) -> None:
        """A last line if the run ended (or was cut short) since the previous one."""
        if self.done != self.last_done:
            self.write(self.line(self.clock()))

    def line(self, now: float) -> str:
        elapsed = now - self.started
        text = f"{self.label}: {self.done}/{self.total} done, {self.failed} failed, " \
               f"{elapsed:.0f} s elapsed"
        if 0 < self.done < self.total:
            text += f", ETA {elapsed / self.done * (self.total - self.done):.0f} s"
        return text
