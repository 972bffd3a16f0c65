"""Dies at once after printing what a careless server prints: its own key-like variables and its
extra arguments raw, one a line (`NAME: value`, `arg: value`: no `--api-key X` or `NAME=X` shape a
name-based redaction could catch), then its environment's API key and all its arguments."""

import os
import sys

for name, value in sorted(os.environ.items()):
    if name.endswith("_KEY"):
        print(f"{name}: {value}", flush=True)
extra = sys.argv[sys.argv.index("--port") + 2:] if "--port" in sys.argv else sys.argv[1:]
for arg in extra:
    print(f"arg: {arg}", flush=True)
print(f"env key: {os.environ.get('GOLDEN_API_KEY', '(none)')}", flush=True)
print(f"args: {' '.join(sys.argv[1:])}", flush=True)
sys.exit(3)
