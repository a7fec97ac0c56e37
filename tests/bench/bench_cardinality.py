"""Series count of one node, and how it grows with GPUs, training ranks and IB ports.

    python -m tests.bench.bench_cardinality
"""

from __future__ import annotations

from tests.bench.common import machine, series_count, started_node, table

BASE = {"gpus": 8, "namespaces": 16, "ports": 8, "ranks": 8}
VARIATIONS = [BASE, {**BASE, "gpus": 1}, {**BASE, "gpus": 4}, {**BASE, "ranks": 0}, {**BASE, "ranks": 1},
              {**BASE, "ranks": 32}, {**BASE, "ports": 1}, {**BASE, "ports": 32}, {**BASE, "namespaces": 1}]


def main() -> None:
    rows = []
    for variation in VARIATIONS:
        with started_node(interval=1.0, with_node_exporter=False, **variation) as node:
            rows.append([variation["gpus"], variation["namespaces"], variation["ports"], variation["ranks"],
                         series_count(node.trainmon.url + "/metrics")])
    base = rows[0][4]

    def slope(index: int, key: str) -> float:
        other = next(r for r, v in zip(rows, VARIATIONS, strict=True)
                     if v[key] != BASE[key] and v == {**BASE, key: v[key]})
        return (base - other[4]) / (BASE[key] - other[index])

    print(f"machine: {machine()}")
    print(table(["gpus", "nvme namespaces", "ib ports", "ranks", "series"], rows))
    print(f"per GPU {slope(0, 'gpus'):.0f} series, per NVMe namespace {slope(1, 'namespaces'):.0f}, "
          f"per IB port {slope(2, 'ports'):.0f}, per training rank {slope(3, 'ranks'):.0f} "
          "(process_* and self-metrics are the constant rest)")


if __name__ == "__main__":
    main()
