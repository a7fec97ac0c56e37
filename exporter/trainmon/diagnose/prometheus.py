"""A minimal client of the Prometheus HTTP API (instant queries), standard library only."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass


class PrometheusUnreadable(Exception):
    """Prometheus did not answer, or answered something that is not a query result."""


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]
    value: float


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
        samples = [Sample(dict(r["metric"]), float(r["value"][1])) for r in data["result"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PrometheusUnreadable(f"not a Prometheus query answer ({exc})") from None
    return [s for s in samples if not math.isnan(s.value)]


@dataclass(frozen=True, slots=True)
class PrometheusClient:
    url: str
    timeout: float = 10.0

    def vector(self, query: str, at: float) -> list[Sample]:
        """Evaluate `query` at Unix time `at`.

        Raises:
            PrometheusUnreadable: Prometheus cannot be reached or refuses the query.
        """
        params = urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"})
        request = urllib.request.Request(f"{self.url.rstrip('/')}/api/v1/query?{params}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:  # 400/422 carry Prometheus' own error message
            body = exc.read()
            if not body:
                raise PrometheusUnreadable(f"{self.url}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusUnreadable(f"cannot reach Prometheus at {self.url}: {reason}") from None
        return parse_vector(body)
