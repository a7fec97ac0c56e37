"""A hypothesis fuzzer over the whole wire schema, against a real daemon over its real socket.

Every field of `wire.FIELDS` is drawn from values of its own kind and from hostile ones: integers of
any size, any Unicode (lone surrogates, control characters, separators), duplicate entries, nesting
and plain garbage. After each example, /metrics must parse in both exposition formats and a
following valid report (a canary rank) must be applied.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import wait_until
from trainmon import wire

CHARS = (st.characters() | st.characters(categories=["Cs"])
         | st.sampled_from("\x00\r\n\x1b\x7f\u0085\u2028\u2029\ufeff\u200b"))
TEXT = st.text(CHARS, max_size=wire.MAX_TEXT + 4)
HUGE = st.integers(min_value=0, max_value=100).map(lambda n: (-1) ** n * 10 ** (300 + n))
NUMBER = st.integers() | HUGE | st.floats() | st.just(1e308) | st.booleans()
JSON = st.recursive(st.none() | NUMBER | TEXT,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                    max_leaves=12)


def texts_of(kind: wire.Text) -> st.SearchStrategy[str]:
    """Strings for a text field: its choices or prefixes when it has them, and any Unicode."""
    prefixed = st.tuples(st.sampled_from(kind.prefixes or ("",)), TEXT).map("".join)
    return (st.sampled_from(kind.choices) if kind.choices else TEXT) | prefixed | TEXT


def values_of(kind: wire.Kind[Any]) -> st.SearchStrategy[Any]:
    """Values shaped for `kind`, right and wrong, or anything at all."""
    if isinstance(kind, wire.Int):
        shaped = st.integers(0, kind.hi - 1) | NUMBER
    elif isinstance(kind, wire.Number):
        shaped = st.floats(kind.lo, min(kind.hi, 1e12)) | NUMBER
    elif isinstance(kind, wire.Text):
        shaped = texts_of(kind)
    elif isinstance(kind, wire.Frames):
        shaped = st.lists(TEXT | st.text(min_size=wire.MAX_FRAME_TEXT - 2, max_size=wire.MAX_FRAME_TEXT + 2),
                          max_size=wire.MAX_FRAMES + 2)
    elif isinstance(kind, wire.Buckets):
        shaped = st.lists(st.integers(0, 10) | NUMBER, min_size=14, max_size=14).map(sorted) | st.lists(NUMBER)
    elif isinstance(kind, wire.Map):
        shaped = st.dictionaries(texts_of(kind.key), values_of(kind.value), max_size=kind.most + 2)
    elif isinstance(kind, wire.Rows):
        entry = st.tuples(*(values_of(c.kind) for c in kind.columns)).map(list)
        rows = st.lists(entry, max_size=min(kind.most, 12))
        shaped = st.tuples(rows, st.booleans()).map(lambda t: t[0] + t[0][:1] if t[1] else t[0])  # a duplicate
    else:
        raise AssertionError(f"no strategy for {kind!r}")
    return shaped | JSON


def nest(fields: dict[str, object]) -> dict[str, object]:
    msg: dict[str, Any] = {}
    for path, value in fields.items():
        *parents, leaf = path.split(".")
        node = msg
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return msg


VALID = {"v": 1, "type": "report", "job_id": "fuzz", "rank": 0, "pid": os.getpid(), "start_time": 1_767_000_000.0,
         "seq": 1}
MESSAGES = st.fixed_dictionaries(
    {}, optional={f.path: values_of(f.kind) for f in wire.FIELDS},
).map(lambda fields: {**VALID, "rank": 1, **nest(fields)}) | st.dictionaries(TEXT, JSON, max_size=6)


def parses_in_both_formats(daemon: Daemon) -> str:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
    from prometheus_client.parser import text_string_to_metric_families as parse_text

    text = daemon.get("/metrics", headers={"Accept": "text/plain"})
    openmetrics = daemon.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert (200, 200) == (text.status_code, openmetrics.status_code)
    list(parse_openmetrics(openmetrics.text))
    for family in parse_text(text.text):
        labels = [tuple(sorted(s.labels.items())) for s in family.samples if s.name == family.name]
        assert len(labels) == len(set(labels)), f"two samples of {family.name} with the same labels"
    return text.text


def test_no_datagram_blinds_the_daemon(tmp_path: Path, daemons: list[Daemon]) -> None:
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.1"])
    daemons.append(daemon)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "ingest.sock")
    canary_seq = iter(range(1, 1 << 30))

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(MESSAGES)
    def example(msg: dict[str, object]) -> None:
        with contextlib.suppress(OSError):  # larger than the socket takes: nothing reached the daemon
            sock.sendto(json.dumps(msg).encode(), path)
        seq = next(canary_seq)
        sock.sendto(json.dumps({**VALID, "seq": seq, "steps": seq}).encode(), path)
        expected = f'trainmon_train_steps_total{{job_id="fuzz",rank="0"}} {float(seq)}'
        wait_until(lambda: expected in parses_in_both_formats(daemon).splitlines())

    try:
        example()
    finally:
        sock.close()
