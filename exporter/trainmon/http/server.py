"""Runs the app under uvicorn: one worker, no access log, bounded connections and requests, prompt shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI

from trainmon.errors import ConfigError
from trainmon.http.auth import BasicAuthMiddleware
from trainmon.http.connections import (
    ACCEPT_BURST,
    LISTEN_BACKLOG,
    AcceptErrorLog,
    ConnectionGuard,
    GuardedH11Protocol,
    OncePerInterval,
    connection_limits,
    raise_nofile_limit,
)
from trainmon.http.limits import RequestLimit, scrape_lane
from trainmon.settings import Settings
from trainmon.webconfig import WebConfig, load_web_config

log = logging.getLogger(__name__)


class Server(uvicorn.Server):
    """uvicorn's server, woken by the stop signal instead of polling for it, re-reading the web-config on SIGHUP.

    uvicorn checks for shutdown every 0.1 s, which alone costs an idle daemon about 0.2% of a core;
    this waits on an event that the signal handler sets, waking once a second for the Date header.
    """

    _exit_requested: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, config: uvicorn.Config, *, nofile: int, handshake_timeout: float,
                 web_config: Path | None = None, auth: BasicAuthMiddleware | None = None) -> None:
        super().__init__(config)
        self._nofile = nofile
        self._handshake_timeout = handshake_timeout
        self._web_config = web_config
        self._auth = auth
        self._relisten = asyncio.Lock()
        self._reloading: asyncio.Task[None] | None = None  # a reference, so the task is not collected

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(AcceptErrorLog(self._nofile))
        await super().startup(sockets)
        signal.signal(signal.SIGHUP, self._hangup)
        if self.config.ssl is not None:
            # uvicorn's listener leaves a TLS handshake asyncio's 60 s: ours gives it the header timeout.
            await self._listen_with(self.config.ssl)
        else:
            for server in self.servers:
                deepen_backlog(server)

    async def main_loop(self) -> None:
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

    def _hangup(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.reload_web_config)

    def reload_web_config(self) -> None:
        """What SIGHUP does: re-read --web-config as exporter-toolkit does; a bad file keeps the running one."""
        if self._web_config is None or self._auth is None:
            log.info("SIGHUP: no --web-config to re-read; nothing to do")
            return
        try:
            web = load_web_config(self._web_config)
        except ConfigError as exc:
            log.error("SIGHUP: kept the running web config: %s", exc)
            return
        self._auth.replace_users(web.basic_auth_users)
        assert self._loop is not None
        self._reloading = self._loop.create_task(self._listen_with(web.ssl_context))
        log.info("SIGHUP: re-read %s: %s, %d basic-auth users", self._web_config,
                 "TLS" if web.ssl_context else "plain HTTP", len(web.basic_auth_users))

    async def _listen_with(self, context: ssl.SSLContext | None) -> None:
        """Serve new connections with `context` (None: plain HTTP) on the same sockets; open connections
        keep theirs. Two SIGHUPs in quick succession take turns."""
        loop = asyncio.get_running_loop()
        # uvicorn's own protocol classes (ours is GuardedH11Protocol), whose constructors take these arguments
        protocol: Callable[..., asyncio.Protocol] = self.config.http_protocol_class
        async with self._relisten:
            replaced = []
            for old in self.servers:
                for listener in old.sockets:
                    server = await loop.create_server(
                        lambda: protocol(config=self.config, server_state=self.server_state,
                                         app_state=self.lifespan.state),
                        sock=socket.socket(fileno=os.dup(listener.fileno())), ssl=context, backlog=ACCEPT_BURST,
                        ssl_handshake_timeout=self._handshake_timeout if context else None)
                    deepen_backlog(server)
                    replaced.append(server)
                old.close()
            self.servers = replaced


def deepen_backlog(server: asyncio.base_events.Server) -> None:
    """Give the kernel's accept queue LISTEN_BACKLOG places while asyncio accepts ACCEPT_BURST per wake-up.

    asyncio uses one number for both; a small queue would drop a scraper's SYN during a flood (a
    one-second retransmit), a large burst would open more descriptors than the limit at once.
    """
    for listener in server.sockets:
        with socket.socket(fileno=os.dup(listener.fileno())) as same:
            same.listen(LISTEN_BACKLOG)


def run_server(app: FastAPI, settings: Settings, web: WebConfig | None = None) -> None:
    """Serve until SIGTERM or SIGINT; returns after a graceful shutdown of at most one second.

    `web` is the `--web-config` the command line already loaded (TLS, basic auth); None serves plain HTTP.
    """
    web = web or WebConfig()
    nofile = raise_nofile_limit()
    auth = BasicAuthMiddleware(app, web.basic_auth_users) if settings.web_config or web.basic_auth_users else None
    guard = ConnectionGuard(connection_limits(nofile, settings.web_header_timeout))
    for noisy in (AcceptErrorLog.logger, "uvicorn.error"):  # a client decides how often these would log
        logging.getLogger(noisy).addFilter(OncePerInterval())
    config = uvicorn.Config(
        RequestLimit(auth or app, settings.web_max_requests, scrape_lane(auth)),
        host=settings.listen.host,
        port=settings.listen.port,
        http=GuardedH11Protocol.bound_to(guard),
        backlog=ACCEPT_BURST,
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
    log.info("HTTP limits: open files %d, connections %d, requests at once %d, header timeout %ss",
             nofile, guard.limits.max_connections, settings.web_max_requests, settings.web_header_timeout)
    Server(config, nofile=nofile, handshake_timeout=settings.web_header_timeout, web_config=settings.web_config,
           auth=auth).run()
