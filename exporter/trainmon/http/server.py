"""Runs the app under uvicorn: one worker, no access log, prompt shutdown."""

from __future__ import annotations

import signal

import uvicorn
from fastapi import FastAPI

from trainmon.settings import Settings


def run_server(app: FastAPI, settings: Settings) -> None:
    """Serve until SIGTERM or SIGINT; returns after a graceful shutdown of at most one second."""
    config = uvicorn.Config(
        app,
        host=settings.listen.host,
        port=settings.listen.port,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        workers=1,
    )
    # uvicorn re-raises the signal that stopped it once it has restored the previous handlers;
    # these make that a no-op, so the caller gets to close the collectors and exit 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    uvicorn.Server(config).run()
