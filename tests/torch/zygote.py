"""A process that imports torch once and forks each rank of a test job from there.

`import torch` costs about 2 core-seconds, and the suite starts some hundred rank processes on a 2-core machine.
Each fork becomes what `python -m MODULE ARGS` would have been: the working directory, the whole environment, the
log as stdout and stderr, `sys.argv`, the module run as `__main__`, and the interpreter's own exit (atexit
handlers, non-daemon threads, the exit status). Only torch is imported before the fork: a job imports it before
anything else it imports (the hook and every framework import it), so no module sees another order than under
`python -m`. `tests.torch.jobs.start_job` is its client.

Protocol, one JSON object per line: requests {"module", "args", "env", "cwd", "log"} on stdin, answered
{"forked": pid} in order; {"exited": pid, "code": returncode} once a child ends (as `subprocess` gives it:
negative for a signal). The zygote kills its children and ends when stdin closes.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import select
import signal
import sys
from typing import Any

import torch  # noqa: F401  (the point: every rank forked below has it imported)


def serve() -> dict[str, Any] | None:
    """Fork a child per request until stdin closes; in a child, return its request (None in the zygote)."""
    children: dict[int, int] = {}  # pidfd: pid
    pending = b""
    while True:
        ready, _, _ = select.select([0, *children], [], [])
        for fd in ready:
            if fd != 0:
                pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                reply({"exited": pid, "code": os.waitstatus_to_exitcode(status)})
                continue
            data = os.read(0, 1 << 16)
            if not data:
                for pid in children.values():
                    os.kill(pid, signal.SIGKILL)
                return None
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                request = json.loads(line)
                if (pid := os.fork()) == 0:
                    for pidfd in children:
                        os.close(pidfd)
                    return dict(request)
                children[os.pidfd_open(pid)] = pid
                reply({"forked": pid})


def reply(message: dict[str, int]) -> None:
    os.write(1, json.dumps(message).encode() + b"\n")


def become(request: dict[str, Any]) -> None:
    """Turn this forked child into `python -m MODULE ARGS` run in `cwd` with `env`, its output in `log`."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0)  # and with it the zygote's request pipe is closed here, as is its reply pipe below
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    sys.argv = [request["module"], *request["args"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    gc.freeze()  # torch's objects are never collected: a child's collections then do not copy their pages
    if (child_request := serve()) is not None:
        become(child_request)
