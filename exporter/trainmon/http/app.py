"""FastAPI application: /, /metrics, /healthz, /readyz, /api/v1/status (SPEC §3), /api/v1/ranks, /api/v1/xid-catalog."""

from __future__ import annotations

import asyncio
import html
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from trainmon import __version__
from trainmon.exposition import already_rendered, render
from trainmon.health.catalog import action_of
from trainmon.health.xid_catalog import CATALOG
from trainmon.snapshot import SnapshotStore

CATALOG_SOURCE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


def create_app(store: SnapshotStore, *, simulated: bool = False) -> FastAPI:
    app = FastAPI(title="trainmon", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    # Every endpoint is a coroutine, so no request takes a thread of FastAPI's pool (which grows to
    # 40 under a flood and keeps them). /metrics answers from the snapshot's cached bytes on the
    # event loop, and renders a new snapshot's on this one thread, so the loop never waits for a render.
    renderer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainmon-render")

    @app.get("/", response_class=HTMLResponse)
    async def landing() -> str:
        banner = ("<p><strong>SIMULATED node</strong>: every GPU and training metric here comes from "
                  "<code>trainmon demo</code>, not from hardware.</p>") if simulated else ""
        return (f"<!doctype html><html><head><title>trainmon</title></head><body>"
                f"<h1>trainmon {html.escape(__version__)}</h1>{banner}"
                "<p>GPU-cluster training monitor.</p><ul>"
                '<li><a href="/metrics">/metrics</a></li><li><a href="/api/v1/status">/api/v1/status</a></li>'
                '<li><a href="/api/v1/ranks">/api/v1/ranks</a></li>'
                '<li><a href="/api/v1/xid-catalog">/api/v1/xid-catalog</a></li>'
                '<li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li>'
                "</ul></body></html>")

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        snapshot = store.latest()
        if snapshot is None:
            return PlainTextResponse("no collection has finished yet\n", status_code=503,
                                     headers={"Retry-After": "1"})
        accept, accept_encoding = request.headers.get("accept", ""), request.headers.get("accept-encoding", "")
        rendered = already_rendered(snapshot, accept, accept_encoding)
        if rendered is None:
            rendered = await asyncio.get_running_loop().run_in_executor(
                renderer, render, snapshot, accept, accept_encoding)
        headers = {"Vary": "Accept, Accept-Encoding"}
        if rendered.content_encoding:
            headers["Content-Encoding"] = rendered.content_encoding
        return Response(rendered.body, media_type=rendered.content_type, headers=headers)

    @app.get("/healthz")
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    @app.get("/readyz")
    async def readyz() -> PlainTextResponse:
        if store.latest() is None:
            return PlainTextResponse("waiting for the first collection\n", status_code=503)
        return PlainTextResponse("ready\n")

    @app.get("/api/v1/status")
    async def status() -> JSONResponse:
        snapshot = store.latest()
        body: dict[str, object] = {"version": __version__, "simulated": simulated, "ready": snapshot is not None}
        if snapshot is not None:
            # the stacks are /api/v1/ranks' (up to 4 KiB a rank): not in every status
            collectors = [asdict(s) | {"ok": s.ok, "details": {k: v for k, v in s.details.items() if k != "rank_hangs"}}
                          for s in snapshot.statuses]
            body["taken_at"] = snapshot.taken_at
            body["collectors"] = collectors
            for s in snapshot.statuses:
                body.update({k: v for k, v in s.details.items() if k in {"gpus", "ranks"}})
        return JSONResponse(body)

    @app.get("/api/v1/ranks")
    async def ranks() -> JSONResponse:
        """The live and exited ranks with their hang state, latest stack and process groups."""
        snapshot = store.latest()
        found: list[object] = []
        for s in snapshot.statuses if snapshot is not None else ():
            hangs = s.details.get("rank_hangs")
            if isinstance(hangs, list):
                found.extend(hangs)
        return JSONResponse({"ready": snapshot is not None, "ranks": found})

    catalog = xid_catalog()

    @app.get("/api/v1/xid-catalog")
    async def xid_catalog_json() -> JSONResponse:
        return JSONResponse(catalog)

    return app


def xid_catalog() -> dict[str, object]:
    """NVIDIA's Xid catalog as the daemon applies it: the same on every node, so not in /metrics."""
    return {"source": CATALOG_SOURCE, "codes": [
        {"xid": xid, "mnemonic": entry.mnemonic, "description": entry.description,
         "immediate_resolution": entry.immediate, "investigatory": entry.investigatory,
         "action": action_of(entry).label}
        for xid, entry in CATALOG.items()]}
