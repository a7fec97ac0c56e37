"""A well-behaved scraper while attackers hold or flood the HTTP port.

Three runs, each on a fresh daemon serving 8 fake GPUs, 16 NVMe namespaces, 8 IB ports and 8
ranks: a quiet one; one under `prlimit --nofile=1024:1024` while an attacker holds --idle
connections (half silent, half inside a header that never ends) and re-opens each one the daemon
closes; one while an attacker floods --flood connections that each send a whole /metrics request,
round after round. The scraper fetches /metrics every 0.1 s with Prometheus' headers on a kept-alive
connection, reconnecting once when the daemon closed it (as Go's HTTP client retries an idempotent
request). The attacker is a separate process, so it does not take the scraper's GIL. Threads and
RSS are read before the attack and after it has stopped.

    python -m tests.bench.bench_flood [--seconds 20] [--idle 1100] [--flood 2000] [--settle 3]
"""

from __future__ import annotations

import argparse
import functools
import http.client
import multiprocessing
import socket
import time
from collections import Counter
from collections.abc import Callable, Sequence
from multiprocessing.synchronize import Event

from tests.bench.common import SCRAPE_HEADERS, arguments, machine, ms, percentile, started_node, table
from tests.helpers.daemon import Daemon
from tests.helpers.siege import PARTIAL_HEADER, allow_open_files, connect, flood


class Scraper:
    """Prometheus' side: one kept-alive connection, renewed when the daemon has closed it."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def scrape(self) -> tuple[float, int]:
        """Seconds to a whole answer, and its status (0: no answer at all)."""
        start = time.perf_counter()
        for _attempt in range(2):
            try:
                self._connection.request("GET", "/metrics", headers=SCRAPE_HEADERS)
                response = self._connection.getresponse()
                response.read()
                return time.perf_counter() - start, response.status
            except (OSError, http.client.HTTPException):
                self._connection.close()
                self._connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=30)
        return time.perf_counter() - start, 0


Attack = Callable[[int, Event, "multiprocessing.Queue[Counter[str]]"], None]


def hold_idle(port: int, stop: Event, results: multiprocessing.Queue[Counter[str]], *, count: int) -> None:
    """Keep `count` idle or slow-header connections open, re-opening each one the daemon closes."""
    allow_open_files(count)
    held: list[socket.socket | None] = [None] * count
    while not stop.is_set():
        for i, sock in enumerate(held):
            if stop.is_set():
                break
            if sock is not None:
                try:
                    if sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK):
                        continue
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                sock.close()
            held[i] = connect(port, PARTIAL_HEADER if i % 2 else b"")
        stop.wait(0.2)
    for sock in held:
        if sock is not None:
            sock.close()
    results.put(Counter())


def keep_flooding(port: int, stop: Event, results: multiprocessing.Queue[Counter[str]], *, count: int) -> None:
    outcomes: Counter[str] = Counter()
    while not stop.is_set():
        outcomes.update(flood(port, count, timeout=10))
    results.put(outcomes)


def measure(daemon: Daemon, seconds: float, settle: float, attack: Attack | None,
            outcomes: Counter[str]) -> list[object]:
    for _ in range(5):  # warm: the first scrape of a snapshot renders it
        Scraper(daemon.port).scrape()
    threads_before, rss_before = daemon.proc_status("Threads"), daemon.proc_status("VmRSS")
    context = multiprocessing.get_context("fork")
    stop, results = context.Event(), context.Queue()
    attacker = context.Process(target=attack, args=(daemon.port, stop, results)) if attack else None
    if attacker:
        attacker.start()
        time.sleep(1.0)  # let the attack build up
    scraper = Scraper(daemon.port)
    times: list[float] = []
    statuses: Counter[int] = Counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        elapsed, status = scraper.scrape()
        times.append(elapsed)
        statuses[status] += 1
        time.sleep(0.1)
    stop.set()
    if attacker:
        outcomes.update(results.get(timeout=60))
        attacker.join()
    time.sleep(settle)
    return [len(times), statuses[200], sum(n for s, n in statuses.items() if s != 200),
            ms(percentile(times, 0.5)), ms(percentile(times, 0.99)), ms(max(times)),
            f"{rss_before / 1024:.0f} -> {daemon.proc_status('VmRSS') / 1024:.0f}",
            f"{threads_before} -> {daemon.proc_status('Threads')}"]


def run(name: str, args: argparse.Namespace, wrapper: Sequence[str], attack: Attack | None,
        outcomes: Counter[str]) -> list[object]:
    with started_node(with_node_exporter=False, wrapper=wrapper) as node:
        return [name, *measure(node.trainmon, args.seconds, args.settle, attack, outcomes)]


def main() -> None:
    args = arguments(__doc__ or "", seconds=20.0, idle=1100, flood=2000, settle=3.0)
    flood_outcomes: Counter[str] = Counter()
    rows = [
        run("quiet", args, (), None, Counter()),
        run(f"{args.idle} idle, nofile 1024", args, ("prlimit", "--nofile=1024:1024"),
            functools.partial(hold_idle, count=args.idle), Counter()),
        run(f"{args.flood}-connection flood", args, (),
            functools.partial(keep_flooding, count=args.flood), flood_outcomes),
    ]
    print(f"machine: {machine()}")
    print(f"one scrape every 0.1 s for {args.seconds:g} s per run (Prometheus' Accept, gzip); RSS in MiB, "
          f"read before the attack and {args.settle:g} s after it stopped")
    print(table(["run", "scrapes", "200", "failed", "p50 ms", "p99 ms", "max ms", "RSS MiB", "threads"], rows))
    print(f"flood answers: {dict(flood_outcomes)}")


if __name__ == "__main__":
    main()
