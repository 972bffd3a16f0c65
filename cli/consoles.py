"""The two consoles: stdout for tables and the verdict, stderr for progress and error lines.

Kept apart from cli.render (which imports the report layer, and so numpy) so that an error line
can be printed at any moment: a Ctrl-C that lands while numpy's extension loads leaves numpy
half-imported, and a second import of it then fails ("cannot load module more than once per
process"). The line that says "interrupted" must not need it.
"""

from __future__ import annotations

from cli.closed_pipe import PipeConsole

out = PipeConsole(highlight=False, soft_wrap=True)
err = PipeConsole(stderr=True, highlight=False, soft_wrap=True)
