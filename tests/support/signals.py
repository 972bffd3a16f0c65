"""Children that get Ctrl-C as a terminal delivers it.

A shell without job control (a script's `cmd &`, a CI step run in the background, `nohup ... &`)
starts its background commands with SIGINT ignored, and a Python started that way installs no
Ctrl-C handler: it honours the ignore, as `nohup golden ... &` should. A test that sends SIGINT
to check what a Ctrl-C does must therefore give its child the default disposition back, else it
tests how it was itself started (a fresh-machine run started in the background saw golden ignore
every SIGINT: two tests timed out and five skipped).
"""

from __future__ import annotations

import signal


def sigint_as_from_a_terminal() -> None:
    """For `subprocess.Popen(preexec_fn=...)`: SIGINT back to its default in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
