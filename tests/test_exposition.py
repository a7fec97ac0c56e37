from __future__ import annotations

import gzip

import pytest
from prometheus_client.metrics_core import Metric

from trainmon.catalog import Family, Kind
from trainmon.exposition import gzip_accepted, render
from trainmon.families import gauge
from trainmon.snapshot import Snapshot


class CountingFamilies(tuple[Metric, ...]):
    """A families tuple that counts how often an encoder walks it."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        CountingFamilies.walks += 1
        return super().__iter__()


def snapshot() -> Snapshot:
    family = gauge(Family("trainmon_example", Kind.GAUGE, "An example.", ("gpu",)))
    family.add_metric(["0"], 1.5)
    return Snapshot(families=CountingFamilies([family]), statuses=(), taken_at=0.0)


def test_a_snapshot_is_rendered_once_per_format() -> None:
    snap = snapshot()
    CountingFamilies.walks = 0

    bodies = [render(snap, "text/plain", "").body for _ in range(5)]
    openmetrics = [render(snap, "application/openmetrics-text;version=1.0.0", "").body for _ in range(5)]

    assert 2 == CountingFamilies.walks
    assert 1 == len(set(bodies)) and 1 == len(set(openmetrics))
    assert b'trainmon_example{gpu="0"} 1.5\n' in bodies[0]
    assert openmetrics[0].endswith(b"# EOF\n")


def test_gzip_is_compressed_once_and_decompresses_to_the_text() -> None:
    snap = snapshot()

    first = render(snap, "text/plain", "gzip, deflate")
    second = render(snap, "text/plain", "gzip")

    assert "gzip" == first.content_encoding
    assert first.body is second.body
    assert gzip.decompress(first.body) == render(snap, "text/plain", "").body


@pytest.mark.parametrize(("header", "expected"), [
    ("gzip", True), ("deflate, gzip;q=0.5", True), ("GZIP", True), ("gzip;q=0", False), ("identity", False),
    ("", False), ("x-gzip", False),
])
def test_gzip_accepted(header: str, expected: bool) -> None:
    assert expected == gzip_accepted(header)


ACCEPT_VARIANTS = [f"application/openmetrics-text;version=1.{k}.{n};escaping={e},text/plain;version=0.0.4;q=0.5"
                   for k in range(4) for n in range(3) for e in ("underscores", "allow-utf-8")]


def test_accept_versions_render_one_openmetrics_body_with_one_content_type() -> None:
    snap = snapshot()
    CountingFamilies.walks = 0

    rendered = [render(snap, accept, "") for accept in ACCEPT_VARIANTS]

    assert 1 == CountingFamilies.walks
    assert {"application/openmetrics-text; version=1.0.0; charset=utf-8"} == {r.content_type for r in rendered}
    assert 1 == len({r.body for r in rendered})


def test_a_text_version_the_client_names_is_not_echoed() -> None:
    snap = snapshot()

    rendered = [render(snap, f"text/plain;version=1.{n}.0", "") for n in range(3)]

    assert {"text/plain; version=0.0.4; charset=utf-8"} == {r.content_type for r in rendered}


def test_openmetrics_without_name_escaping_is_byte_identical_for_a_whole_node(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The demo's GPUs, NVMe, InfiniBand and job: the faster encoding changes no byte."""
    import functools
    import re

    from prometheus_client.openmetrics import exposition as openmetrics
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from tests.helpers.daemon import start_daemon
    from trainmon.compat import without_name_escaping

    daemon = start_daemon(tmp_path, command="demo")  # its own NVMe and InfiniBand tree
    try:
        body = daemon.get("/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0"}).text
    finally:
        daemon.stop()
    families = list(text_string_to_metric_families(body))
    legacy = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

    class Registry:
        def collect(self):  # type: ignore[no-untyped-def]
            return families

    escaped = functools.partial(openmetrics.generate_latest, escaping=openmetrics.UNDERSCORES, version="1.0.0")
    assert escaped(Registry()) == without_name_escaping(escaped)(Registry())
    assert without_name_escaping(escaped) is not escaped
    for family in families:
        for sample in family.samples:
            assert legacy.fullmatch(sample.name) and all(legacy.fullmatch(k) for k in sample.labels), sample


def test_openmetrics_without_name_escaping_keeps_label_value_escapes() -> None:
    """Label values (job ids come from training jobs) are escaped the same way in both modes."""
    import functools

    from prometheus_client.openmetrics import exposition as openmetrics

    from trainmon.compat import without_name_escaping

    family = gauge(Family("trainmon_train_loss", Kind.GAUGE, "Loss.", ("job_id", "rank")))
    for job in ['a"b', "back\\slash", "new\nline", "ünïcode ✓", "{}=,"]:
        family.add_metric([job, "0"], 1.0)
    snap = Snapshot(families=(family,), statuses=(), taken_at=0.0)
    escaped = functools.partial(openmetrics.generate_latest, escaping=openmetrics.UNDERSCORES, version="1.0.0")

    assert escaped(snap) == without_name_escaping(escaped)(snap)
