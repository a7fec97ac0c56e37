"""A minimal client of the Prometheus HTTP API (instant queries), standard library only.

Whatever answers at the URL is not trusted: an answer is read a chunk at a time and refused past
`MAX_ANSWER_BYTES`, any transport failure (refused, reset, cut mid-answer, a malformed status line) is
`PrometheusUnreadable`, and `deadline()` bounds the whole run, so a server that answers a byte at a
time (headers included) cannot hold diagnose longer than the deadline.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import signal
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from types import FrameType
from typing import Protocol

MAX_ANSWER_BYTES = 64 << 20  # a job's instant vectors are far smaller; a larger answer is refused unread
READ_BYTES = 64 << 10
_LENGTH = re.compile(r"[0-9]{1,20}")


class PrometheusUnreadable(Exception):
    """Prometheus did not answer, or answered something that is not a query result."""


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]
    value: float


class _Answer(Protocol):
    """An HTTP answer: urllib's response, or its HTTPError."""

    @property
    def headers(self) -> Message: ...

    def read1(self, size: int = ...) -> bytes: ...


@contextmanager
def deadline(seconds: float, url: str) -> Iterator[None]:
    """Past `seconds`, PrometheusUnreadable is raised wherever the run is (a blocked read included).

    SIGALRM: the main thread only, which is where the command line runs.
    """
    def expire(signum: int, frame: FrameType | None) -> None:
        raise PrometheusUnreadable(f"Prometheus at {url} gave no complete answer within {seconds:g} s "
                                   f"(--timeout sets the limit)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def parse_vector(body: bytes) -> list[Sample]:
    """The samples of an instant-query answer (`resultType` vector); NaN samples are dropped.

    Raises:
        PrometheusUnreadable: not JSON, an error status, or not a vector.
    """
    try:
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise PrometheusUnreadable(f"query failed: {answer.get('error', answer.get('status'))}")
        data = answer["data"]
        if data["resultType"] != "vector":
            raise PrometheusUnreadable(f"expected a vector, got {data['resultType']}")
        samples = [Sample(_labels(r["metric"]), float(r["value"][1])) for r in data["result"]]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise PrometheusUnreadable(f"not a Prometheus query answer ({type(exc).__name__}: {exc})") from None
    return [s for s in samples if not math.isnan(s.value)]


def _labels(metric: Mapping[str, object]) -> dict[str, str]:
    labels = {name: value for name, value in dict(metric).items() if isinstance(value, str)}
    if len(labels) != len(metric):
        raise TypeError("a label value that is not a string")
    return labels


@dataclass(frozen=True, slots=True)
class PrometheusClient:
    url: str
    timeout: float = 60.0  # a socket's wait for the next bytes; `deadline()` bounds the whole run
    max_bytes: int = MAX_ANSWER_BYTES

    def vector(self, query: str, at: float) -> list[Sample]:
        """Evaluate `query` at Unix time `at`.

        Raises:
            PrometheusUnreadable: Prometheus cannot be reached, refuses the query, or answers garbage.
        """
        params = urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"})
        request = urllib.request.Request(f"{self.url.rstrip('/')}/api/v1/query?{params}")
        try:
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    body = self._read(response)
            except urllib.error.HTTPError as exc:  # 400/422 carry Prometheus' own error message
                body = self._read(exc)
                if not body:
                    raise PrometheusUnreadable(f"{self.url}: HTTP {exc.code}") from None
        except http.client.HTTPException as exc:  # a malformed status line or headers, a chunk cut short
            raise PrometheusUnreadable(f"Prometheus at {self.url} answered malformed HTTP: "
                                       f"{type(exc).__name__} {exc}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusUnreadable(f"cannot reach Prometheus at {self.url}: {reason}") from None
        return parse_vector(body)

    def _read(self, answer: _Answer) -> bytes:
        """The whole answer, a chunk at a time; refused, before or while reading, past `max_bytes`."""
        text = answer.headers.get("Content-Length", "").strip()
        declared = int(text) if _LENGTH.fullmatch(text) else None
        if declared is not None and declared > self.max_bytes:
            raise self._too_large()
        chunks: list[bytes] = []
        received = 0
        while chunk := answer.read1(READ_BYTES):
            received += len(chunk)
            if received > self.max_bytes:
                raise self._too_large()
            chunks.append(chunk)
        if declared is not None and received < declared:  # read1() ends quietly where the server hung up
            raise PrometheusUnreadable(f"Prometheus at {self.url} cut its answer short: IncompleteRead "
                                       f"({received} of {declared} bytes)")
        return b"".join(chunks)

    def _too_large(self) -> PrometheusUnreadable:
        return PrometheusUnreadable(f"Prometheus at {self.url} answered over {self.max_bytes >> 20} MiB: refused "
                                    f"(no instant query of one job needs that much)")
