"""A server that leaves a helper behind outside its process group, as a daemonizing helper or a
container client does: at start it double-forks, the helper moves into a new session (setsid)
and writes its pid to --pid-file, then sleeps forever. The server itself then serves like the
other fakes; with --slow its /generate never answers (a test kills golden mid-request)."""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_http import one_token, serve  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--pid-file", required=True)
parser.add_argument("--slow", action="store_true")
opts, _ = parser.parse_known_args()

child = os.fork()
if child == 0:
    os.setsid()  # out of the server's session and process group
    if os.fork() > 0:
        os._exit(0)  # the double fork: the helper's parent is gone, init adopts it
    Path(opts.pid_file).write_text(f"{os.getpid()}\n")
    while True:
        time.sleep(1)
os.waitpid(child, 0)


def answer(body):
    if opts.slow:
        time.sleep(600)
    return one_token(body)


serve(on_generate=answer)
