"""Scrape latency of trainmon against Debian's node_exporter on the same node.

trainmon serves 8 GPUs (fake NVML, GPM on), 16 NVMe namespaces, 8 IB ports with hw_counters and 8
live training ranks; node_exporter serves the same procfs/sysfs tree with only its diskstats, nvme
and infiniband collectors. Scrapes alternate between the two in one run, with Prometheus' own
Accept and Accept-Encoding headers, on one keep-alive connection per client.

    python -m tests.bench.bench_scrape [--scrapes 1000] [--clients 50] [--per-client 20]
"""

from __future__ import annotations

import threading

from tests.bench.common import Scraper, arguments, machine, mean, ms, percentile, series_count, started_node, table


def sequential(urls: dict[str, str], scrapes: int) -> dict[str, list[float]]:
    scrapers = {name: Scraper(url) for name, url in urls.items()}
    times: dict[str, list[float]] = {name: [] for name in urls}
    for _ in range(scrapes):
        for name, scraper in scrapers.items():  # alternate, so both see the same machine noise
            times[name].append(scraper.scrape()[0])
    for scraper in scrapers.values():
        scraper.close()
    return times


def concurrent(url: str, clients: int, per_client: int) -> tuple[list[float], int]:
    """Latencies of the answered scrapes, and how many were refused (node_exporter answers 503
    beyond its --web.max-requests, 40 by default)."""
    times: list[float] = []
    refused = 0
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client() -> None:
        nonlocal refused
        scraper = Scraper(url)
        barrier.wait()
        mine, errors = [], 0
        for _ in range(per_client):
            try:
                mine.append(scraper.scrape()[0])
            except RuntimeError:
                errors += 1
        scraper.close()
        with lock:
            times.extend(mine)
            refused += errors

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times, refused


def main() -> None:
    args = arguments(__doc__ or "", scrapes=1000, clients=50, per_client=20)
    with started_node() as node:
        assert node.node_exporter_url is not None
        urls = {"trainmon": node.trainmon.url + "/metrics", "node_exporter": node.node_exporter_url}
        series = {name: series_count(url) for name, url in urls.items()}
        sizes = {name: Scraper(url).scrape()[1] for name, url in urls.items()}
        seq = sequential(urls, args.scrapes)
        conc = {name: concurrent(url, args.clients, args.per_client) for name, url in urls.items()}

    rows = []
    for name in urls:
        rows.append([name, series[name], sizes[name], ms(percentile(seq[name], 0.5)), ms(percentile(seq[name], 0.99)),
                     ms(mean(seq[name])), ms(percentile(conc[name][0], 0.5)), ms(percentile(conc[name][0], 0.99)),
                     conc[name][1]])
    print(f"machine: {machine()}")
    print(f"{args.scrapes} sequential scrapes each (alternating); {args.clients} concurrent clients x "
          f"{args.per_client} scrapes each; gzip on")
    print(table(["exporter", "series", "gzip bytes", "seq p50 ms", "seq p99 ms", "seq mean ms", "conc p50 ms",
                 "conc p99 ms", "conc refused"], rows))
    ratio = percentile(seq["trainmon"], 0.5) / percentile(seq["node_exporter"], 0.5)
    conc_ratio = percentile(conc["trainmon"][0], 0.5) / percentile(conc["node_exporter"][0], 0.5)
    per_series = series["trainmon"] / series["node_exporter"]
    print(f"p50 ratio trainmon/node_exporter: sequential {ratio:.2f}, concurrent {conc_ratio:.2f}; "
          f"trainmon serves {per_series:.1f}x the series")


if __name__ == "__main__":
    main()
