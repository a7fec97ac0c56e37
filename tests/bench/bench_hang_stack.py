"""What one capture of a stuck training thread's stack costs the reporter thread (`trainmon.hook.hang`).

    python -m tests.bench.bench_hang_stack [--calls 2000]

A thread blocks 30 and 200 frames deep; the figure is the median over 5 blocks of `calls` captures, in
wall time on the capturing thread. Prints figures; asserts nothing. Training pays nothing: the
training thread is not interrupted, and a capture happens once per hang episode.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from trainmon.hook.hang import thread_stack


def _nest(depth: int, ready: threading.Event, release: threading.Event) -> None:
    if depth:
        _nest(depth - 1, ready, release)
    else:
        ready.set()
        release.wait()


def capture_seconds(depth: int, calls: int) -> tuple[float, int]:
    """Median seconds per capture of a thread `depth` frames deep, and the frames a capture keeps."""
    ready, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=_nest, args=(depth, ready, release))
    thread.start()
    ready.wait()
    try:
        blocks = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                thread_stack(thread.ident or 0)
            blocks.append((time.perf_counter() - t0) / calls)
        return statistics.median(blocks), len(thread_stack(thread.ident or 0))
    finally:
        release.set()
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    calls = parser.parse_args().calls
    for depth in (30, 200):
        seconds, frames = capture_seconds(depth, calls)
        print(f"stack {depth} frames deep: {seconds * 1e6:.1f} us per capture, {frames} frames kept")


if __name__ == "__main__":
    main()
