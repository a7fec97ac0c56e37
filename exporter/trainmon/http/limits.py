"""At most N requests served at once; the next one gets 503 straight away (node_exporter's --web.max-requests).

Scrapes have a lane of their own, also N wide: with basic auth, the requests whose credentials were
verified before (Prometheus sends the same ones every scrape); without it, requests for /metrics.
Everything else (password checks, unknown clients, other paths) shares the other lane, so a flood of
wrong passwords can fill that one and never a scraper's.
"""

from __future__ import annotations

from collections.abc import Callable

from trainmon.http.auth import ASGIApp, BasicAuthMiddleware, Receive, Scope, Send


def is_metrics(scope: Scope) -> bool:
    return bool(scope.get("path") == "/metrics")


def scrape_lane(auth: BasicAuthMiddleware | None) -> Callable[[Scope], bool]:
    """Which requests are scrapes: verified credentials while basic auth has users (SIGHUP may change
    that), else /metrics requests."""
    if auth is None:
        return is_metrics
    return lambda scope: auth.verified(scope) if auth.has_users else is_metrics(scope)


class Lane:
    """Requests in progress in one lane; the event loop runs every request's coroutine, so a plain counter is
    exact."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.in_flight = 0
        self.refused = 0


class RequestLimit:
    """ASGI middleware counting the HTTP requests in progress, basic-auth checks included, in two lanes:
    `is_scrape` picks the scrapers' lane."""

    def __init__(self, app: ASGIApp, max_requests: int, is_scrape: Callable[[Scope], bool]) -> None:
        self._app = app
        self._is_scrape = is_scrape
        self.scrapes = Lane(max_requests)
        self.others = Lane(max_requests)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        lane = self.scrapes if self._is_scrape(scope) else self.others
        if lane.in_flight >= lane.size:
            lane.refused += 1
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"retry-after", b"1")]})
            await send({"type": "http.response.body",
                        "body": f"more than {lane.size} requests in progress (--web-max-requests)\n".encode()})
            return
        lane.in_flight += 1
        try:
            await self._app(scope, receive, send)
        finally:
            lane.in_flight -= 1
