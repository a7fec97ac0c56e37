"""Runs the app under uvicorn: one worker, no access log, prompt shutdown."""

from __future__ import annotations

import signal
import sys

import uvicorn
from fastapi import FastAPI

from trainmon.errors import ConfigError
from trainmon.settings import Settings
from trainmon.webconfig import WebConfig, load_web_config


def run_server(app: FastAPI, settings: Settings) -> None:
    """Serve until SIGTERM or SIGINT; returns after a graceful shutdown of at most one second."""
    try:
        web = load_web_config(settings.web_config) if settings.web_config else WebConfig()
    except ConfigError as exc:
        print(f"trainmon: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    config = uvicorn.Config(
        web.wrap(app),
        host=settings.listen.host,
        port=settings.listen.port,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        workers=1,
    )
    config.load()
    # Our own context: uvicorn's has no minimum TLS version (--web-config, docs/security.md).
    config.ssl = web.ssl_context
    # uvicorn re-raises the signal that stopped it once it has restored the previous handlers;
    # these make that a no-op, so the caller gets to close the collectors and exit 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    uvicorn.Server(config).run()
