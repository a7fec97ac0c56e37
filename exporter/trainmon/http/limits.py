"""At most N requests served at once; the next one gets 503 straight away (node_exporter's --web.max-requests)."""

from __future__ import annotations

from trainmon.http.auth import ASGIApp, Receive, Scope, Send


class RequestLimit:
    """ASGI middleware counting the HTTP requests in progress, basic-auth checks included.

    The event loop runs every request's coroutine, so a plain counter is exact.
    """

    def __init__(self, app: ASGIApp, max_requests: int) -> None:
        self._app = app
        self._max = max_requests
        self.in_flight = 0
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if self.in_flight >= self._max:
            self.refused += 1
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"retry-after", b"1")]})
            await send({"type": "http.response.body",
                        "body": f"more than {self._max} requests in progress (--web-max-requests)\n".encode()})
            return
        self.in_flight += 1
        try:
            await self._app(scope, receive, send)
        finally:
            self.in_flight -= 1
