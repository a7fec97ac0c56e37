"""Runs the app under uvicorn: one worker, no access log, prompt shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from types import FrameType

import uvicorn
from fastapi import FastAPI

from trainmon.settings import Settings
from trainmon.webconfig import WebConfig


class Server(uvicorn.Server):
    """uvicorn's server, woken by the stop signal instead of polling for it.

    uvicorn checks for shutdown every 0.1 s, which alone costs an idle daemon about 0.2% of a core;
    this waits on an event that the signal handler sets, waking once a second for the Date header.
    """

    _exit_requested: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._exit_requested = asyncio.Event()
        if self.should_exit:
            return
        while not await self.on_tick(0):  # tick 0: refresh the Date header, check for exit
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_requested.wait(), timeout=1.0)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._exit_requested is not None:
            self._loop.call_soon_threadsafe(self._exit_requested.set)


def run_server(app: FastAPI, settings: Settings, web: WebConfig | None = None) -> None:
    """Serve until SIGTERM or SIGINT; returns after a graceful shutdown of at most one second.

    `web` is the `--web-config` the command line already loaded (TLS, basic auth); None serves plain HTTP.
    """
    web = web or WebConfig()
    config = uvicorn.Config(
        web.wrap(app),
        host=settings.listen.host,
        port=settings.listen.port,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        # Prometheus keeps one connection per target between scrapes (15-60 s apart); uvicorn's 5 s
        # default would make it reconnect every time.
        timeout_keep_alive=120,
        workers=1,
    )
    config.load()
    # Our own context: uvicorn's has no minimum TLS version (--web-config, docs/security.md).
    config.ssl = web.ssl_context
    # uvicorn re-raises the signal that stopped it once it has restored the previous handlers;
    # these make that a no-op, so the caller gets to close the collectors and exit 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    Server(config).run()
