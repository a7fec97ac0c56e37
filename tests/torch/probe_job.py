"""`python -m tests.torch.probe_job OUT CODE`: what a rank forked by tests.torch.zygote sees, written to OUT as
JSON; then prints to both streams, leaves an atexit handler and a non-daemon thread that write once it ends, and
exits with CODE ("raise": an uncaught exception; "hang": sleeps until killed)."""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from pathlib import Path


def finish_late() -> None:
    time.sleep(0.5)
    print("thread finished", flush=True)


if __name__ == "__main__":
    out, code = Path(sys.argv[1]), sys.argv[2]
    out.write_text(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "name": __name__,
                               "torch_imported_before": "torch" in sys.modules, "stdin": sys.stdin.read()}))
    print("to stdout")
    print("to stderr", file=sys.stderr)
    atexit.register(lambda: print("atexit ran", flush=True))
    threading.Thread(target=finish_late).start()
    if code == "raise":
        raise RuntimeError("the job failed")
    if code == "hang":
        time.sleep(600)
    sys.exit(int(code))
