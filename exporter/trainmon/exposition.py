"""Snapshot -> bytes, by the scrape's Accept and Accept-Encoding headers.

Formatting costs 7-11 µs per sample, so each snapshot is rendered at most once per format and
encoding; every later scrape of the same snapshot reuses the bytes. Accept is negotiated to the two
formats trainmon produces, text 0.0.4 and OpenMetrics 1.0.0: a client's version string is never a
cache key nor echoed, so varying it cannot make the daemon render (and keep) one body per variant.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder

from trainmon.compat import without_name_escaping
from trainmon.snapshot import Snapshot

# OpenMetrics 1.0.0 when a client accepts any 1.x or later (the newer versions only add what trainmon
# never serves: native histograms, UTF-8 names), else text 0.0.4.
OPENMETRICS = "application/openmetrics-text"
TEXT = ""


@dataclass(frozen=True, slots=True)
class Rendered:
    body: bytes
    content_type: str
    content_encoding: str | None


def gzip_accepted(accept_encoding: str) -> bool:
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() == "gzip":
            return params.replace(" ", "").lower() not in {"q=0", "q=0.0", "q=0.00", "q=0.000"}
    return False


def negotiated(accept: str) -> str:
    """The Accept header, OPENMETRICS or TEXT, that stands for what the client's `accept` gets."""
    _, content_type = choose_encoder(accept)
    return OPENMETRICS if content_type.startswith(OPENMETRICS) else TEXT


def render(snapshot: Snapshot, accept: str, accept_encoding: str) -> Rendered:
    encoder, content_type = choose_encoder(negotiated(accept))
    encoder = without_name_escaping(encoder)
    plain = snapshot.rendered.get((content_type, "identity"), lambda: encoder(snapshot))
    if not gzip_accepted(accept_encoding):
        return Rendered(plain, content_type, None)
    # mtime=0 keeps the gzip bytes a pure function of the text.
    compressed = snapshot.rendered.get((content_type, "gzip"), lambda: gzip.compress(plain, 6, mtime=0))
    return Rendered(compressed, content_type, "gzip")


def already_rendered(snapshot: Snapshot, accept: str, accept_encoding: str) -> Rendered | None:
    """What `render` returns, if this snapshot was rendered in that format before; None if it would render."""
    _, content_type = choose_encoder(negotiated(accept))
    encoding = "gzip" if gzip_accepted(accept_encoding) else None
    body = snapshot.rendered.peek((content_type, encoding or "identity"))
    return None if body is None else Rendered(body, content_type, encoding)
