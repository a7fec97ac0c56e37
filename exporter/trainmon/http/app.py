"""FastAPI application: /, /metrics, /healthz, /readyz, /api/v1/status (SPEC §3)."""

from __future__ import annotations

import html
from dataclasses import asdict

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from trainmon import __version__
from trainmon.exposition import render
from trainmon.snapshot import SnapshotStore


def create_app(store: SnapshotStore, *, simulated: bool = False) -> FastAPI:
    app = FastAPI(title="trainmon", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def landing() -> str:
        banner = ("<p><strong>SIMULATED node</strong>: every GPU and training metric here comes from "
                  "<code>trainmon demo</code>, not from hardware.</p>") if simulated else ""
        return (f"<!doctype html><html><head><title>trainmon</title></head><body>"
                f"<h1>trainmon {html.escape(__version__)}</h1>{banner}"
                "<p>GPU-cluster training monitor.</p><ul>"
                '<li><a href="/metrics">/metrics</a></li><li><a href="/api/v1/status">/api/v1/status</a></li>'
                '<li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li>'
                "</ul></body></html>")

    # A plain `def`: FastAPI runs it in its thread pool, so rendering never blocks the event loop.
    @app.get("/metrics")
    def metrics(request: Request) -> Response:
        snapshot = store.latest()
        if snapshot is None:
            return PlainTextResponse("no collection has finished yet\n", status_code=503,
                                     headers={"Retry-After": "1"})
        rendered = render(snapshot, request.headers.get("accept", ""), request.headers.get("accept-encoding", ""))
        headers = {"Vary": "Accept, Accept-Encoding"}
        if rendered.content_encoding:
            headers["Content-Encoding"] = rendered.content_encoding
        return Response(rendered.body, media_type=rendered.content_type, headers=headers)

    @app.get("/healthz")
    def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    @app.get("/readyz")
    def readyz() -> PlainTextResponse:
        if store.latest() is None:
            return PlainTextResponse("waiting for the first collection\n", status_code=503)
        return PlainTextResponse("ready\n")

    @app.get("/api/v1/status")
    def status() -> JSONResponse:
        snapshot = store.latest()
        body: dict[str, object] = {"version": __version__, "simulated": simulated, "ready": snapshot is not None}
        if snapshot is not None:
            collectors = [asdict(s) | {"ok": s.ok} for s in snapshot.statuses]
            body["taken_at"] = snapshot.taken_at
            body["collectors"] = collectors
            for s in snapshot.statuses:
                body.update({k: v for k, v in s.details.items() if k in {"gpus", "ranks"}})
        return JSONResponse(body)

    return app
