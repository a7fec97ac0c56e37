from __future__ import annotations

import gzip

import pytest

from trainmon.exposition import gzip_accepted, render
from trainmon.families import gauge
from trainmon.snapshot import Snapshot


class CountingFamilies(tuple):
    """A families tuple that counts how often an encoder walks it."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        CountingFamilies.walks += 1
        return super().__iter__()


def snapshot() -> Snapshot:
    family = gauge("example", "An example.", ["gpu"])
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
