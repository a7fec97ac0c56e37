"""A scraper with verified basic-auth credentials while many clients send wrong passwords (issue 31).

One daemon with one bcrypt user (cost --cost); the scraper's credentials are verified once at start.
The scraper fetches /metrics every 0.05 s, first on the idle daemon, then while --clients connections
each send a wrong password, read the answer and send again. Prints the scraper's statuses and p50/p99,
and what the flood was answered.

    python -m tests.bench.bench_auth_flood [--scrapes 100] [--clients 48] [--cost 12]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import bcrypt
import httpx

from tests.bench.common import arguments, machine, ms, percentile, table
from tests.helpers.daemon import start_daemon
from tests.helpers.siege import WRONG_PASSWORD, request_flood, timed_scrapes


def main() -> None:
    args = arguments(__doc__.splitlines()[0], scrapes=100, clients=48, cost=12)
    print(machine())
    with tempfile.TemporaryDirectory(prefix="trainmon-auth-") as tmp:
        root = Path(tmp)
        (root / "web.yml").write_text("basic_auth_users:\n  prometheus: '"
                                      + bcrypt.hashpw(b"right", bcrypt.gensalt(args.cost)).decode() + "'\n")
        daemon = start_daemon(root, ["--collectors", "nvme", "--web-config", str(root / "web.yml")],
                              client={"auth": ("prometheus", "right")})
        rows = []
        try:
            with httpx.Client(base_url=daemon.url, auth=("prometheus", "right"), timeout=30) as scraper:
                quiet = timed_scrapes(scraper, args.scrapes)
                with request_flood(daemon.port, args.clients, WRONG_PASSWORD) as flood:
                    time.sleep(1.0)
                    loaded = timed_scrapes(scraper, args.scrapes)
                answered = dict(flood.outcomes)
        finally:
            daemon.stop()
        for name, (statuses, seconds) in (("idle", quiet), (f"{args.clients} wrong-password clients", loaded)):
            rows.append([name, f"{statuses.count(200)}/{len(statuses)}", ms(percentile(seconds, 0.5)),
                         ms(percentile(seconds, 0.99))])
    print(table(["daemon", "scraper 200s", "p50 ms", "p99 ms"], rows))
    print(f"flood answers: {answered}")


if __name__ == "__main__":
    main()
