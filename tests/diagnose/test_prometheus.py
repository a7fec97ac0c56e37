"""trainmon.diagnose.prometheus.parse_vector and the duration flag: bad input gets a clear error."""

from __future__ import annotations

import pytest

from trainmon.diagnose import parse_duration
from trainmon.diagnose.prometheus import PrometheusUnreadable, Sample, parse_vector


def test_a_vector_answer_becomes_samples_and_nan_is_dropped() -> None:
    body = (b'{"status":"success","data":{"resultType":"vector","result":['
            b'{"metric":{"rank":"1"},"value":[1.5,"0.25"]},{"metric":{"rank":"2"},"value":[1.5,"NaN"]}]}}')

    assert [Sample({"rank": "1"}, 0.25)] == parse_vector(body)


@pytest.mark.parametrize(("body", "message"), [
    (b"<html>", "not a Prometheus query answer"),
    (b'{"status":"error","error":"parse error at char 3"}', "parse error at char 3"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[]}}', "expected a vector"),
    (b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}', "not a Prometheus"),
    (b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"rank":0},"value":[1,"1"]}]}}',
     "a label value that is not a string"),
    (b"[" * 100_000, "RecursionError"),
])
def test_anything_else_is_unreadable(body: bytes, message: str) -> None:
    with pytest.raises(PrometheusUnreadable, match=message):
        parse_vector(body)


@pytest.mark.parametrize(("text", "seconds"), [("1h", 3600), ("90m", 5400), ("1h30m", 5400), ("15s", 15)])
def test_durations(text: str, seconds: int) -> None:
    assert seconds == parse_duration(text)


@pytest.mark.parametrize("text", ["", "1", "h", "1x", "0s", "1h 2m"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)
