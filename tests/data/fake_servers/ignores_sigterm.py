"""Healthy, but it and a child it starts (same process group) ignore SIGTERM, like a server
stuck in a CUDA call: only SIGKILL of the whole group gets rid of both."""

import signal
import subprocess
import sys

from fake_http import serve

signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
                          "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "time.sleep(600)"])
print(f"fake child pid {child.pid}", flush=True)
serve()
