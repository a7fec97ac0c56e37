"""Snapshot, SnapshotStore and RenderCache: what a scrape reads, and rendering each body once."""

from __future__ import annotations

import threading

from trainmon.catalog import Family, Kind
from trainmon.families import Metric, gauge
from trainmon.snapshot import CollectorStatus, RenderCache, Snapshot, SnapshotStore

KEY = ("text/plain", "gzip")


def family(name: str, value: float) -> Metric:
    metric = gauge(Family(f"trainmon_{name}", Kind.GAUGE, "test"))
    metric.add_metric([], value)
    return metric


def snapshot(*families: Metric) -> Snapshot:
    statuses = (CollectorStatus(name="gpu", state="ok", duration_s=0.1),
                CollectorStatus(name="ib", state="no_data", duration_s=0.0),
                CollectorStatus(name="nvme", state="failing", duration_s=0.2, error="OSError: gone"))
    return Snapshot(families=families, statuses=statuses, taken_at=100.0)


def test_a_body_is_rendered_once_per_key_even_under_concurrent_scrapes() -> None:
    cache, calls, start = RenderCache(), [], threading.Barrier(8)

    def render() -> bytes:
        calls.append(1)
        return b"body"

    def scrape() -> None:
        start.wait()
        assert b"body" == cache.get(KEY, render)

    threads = [threading.Thread(target=scrape) for _ in range(8)]
    assert cache.peek(KEY) is None
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert 1 == len(calls)
    assert b"body" == cache.peek(KEY)
    assert cache.peek(("text/plain", "identity")) is None


def test_a_snapshot_serves_its_families_and_finds_statuses_by_name() -> None:
    families = (family("a", 1.0), family("b", 2.0))
    snap = snapshot(*families)

    assert families == tuple(snap.collect())
    assert "OSError: gone" == snap.status("nvme").error  # type: ignore[union-attr]
    assert snap.status("missing") is None
    assert [True, True, False] == [s.ok for s in snap.statuses]  # absent hardware is not a failure


def test_the_store_is_empty_until_published_and_wakes_a_waiter() -> None:
    store, snap = SnapshotStore(), snapshot()
    assert store.latest() is None
    assert store.wait(0.01) is None

    waited: list[Snapshot | None] = []
    waiter = threading.Thread(target=lambda: waited.append(store.wait(30)))
    waiter.start()
    store.publish(snap)
    waiter.join()

    assert [snap] == waited
    assert store.latest() is snap


def test_the_store_keeps_only_the_families_its_profile_serves() -> None:
    store = SnapshotStore(shape=lambda metric: metric if metric.name.endswith("kept") else None)
    published = snapshot(family("kept", 1.0), family("dropped", 2.0))

    store.publish(published)

    served = store.latest()
    assert served is not None
    assert ["trainmon_kept"] == [f.name for f in served.families]
    assert published.statuses == served.statuses
    assert 2 == len(published.families)  # the collected snapshot itself is left whole
