"""A replay report (docs/report.md) as one self-contained HTML page (docs/report-html.md).

Why a page at all: a failing replay is a tree of requests, a histogram of hit lengths and a few
thousand per-position deltas; a table of numbers hides the pattern (drift that starts at a track
boundary, one tier that always misses, a repeat that flakes). The page draws them.

Self-contained on purpose: reports are attached to CI runs and opened from disk or an artifact
store, often offline, and a page that fetches nothing cannot leak a lab's host names or break when
a CDN moves. So: inline CSS and a few lines of inline JS (report.css, report.js: package data,
inlined; the JS only enhances, everything is readable without it), SVG drawn here, no URL in any
attribute except same-page `#anchors`. Every piece of report text goes through `values.esc`.

One concept per module, data flowing one way (report dict -> fields -> cards and drawings ->
body -> page):
- values.py: tolerant getters and formatters; styles.py: status, verdict and tier colours;
  fields.py: what a report's fields mean (verdict, requests, repeats, anchors);
- frame.py: the document, its CSS/JS and the verdict banner; render.py: the whole page;
- body.py: one report's cards in order: cards.py (alerts, numbers, run), fingerprints.py,
  tree_drawing.py, histogram.py, grid.py, failures.py (with divergence.py and charts.py);
- matrix.py: the profile x request grid and each profile's body.

Pure: `render_html` takes the report dict and returns a string; only `write_html` touches disk.
"""

from __future__ import annotations

from replay.report.html.render import render_html, write_html

SCHEMA_PREFIX = "golden-replay/report/"  # the `schema` of every report document starts with it

__all__ = ["SCHEMA_PREFIX", "render_html", "write_html"]
