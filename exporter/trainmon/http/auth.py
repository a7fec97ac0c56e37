"""Basic auth for the HTTP server: the ASGI middleware that checks `basic_auth_users` of `--web-config`.

The file is parsed in `trainmon.webconfig`; this module only answers requests with it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from trainmon.webconfig import BCRYPT_COSTS

# bcrypt reads at most 72 bytes of a password; bcrypt 5 raises ValueError for more.
BCRYPT_MAX_PASSWORD = 72
REALM_CHALLENGE = b'Basic realm="trainmon"'
SUCCESS_CACHE_SIZE = 1024
# bcrypt checks under way at once, all clients together, and per client address (waiting ones included):
# a check is CPU work, so more at once only takes the cores scrapes need.
BCRYPT_AT_ONCE = 2
BCRYPT_PER_CLIENT = 2
# With users of mixed costs, start-up times one check at the highest cost up to this one (about 4 s
# of one core at 16); above it, the first check a client makes at that cost is the measure.
MEASURED_COSTS = 16

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def bcrypt_cost(hashed: bytes) -> int:
    return int(hashed[4:6])


def decoy_hash(users: Mapping[str, bytes]) -> bytes:
    """A bcrypt hash no password matches, at the highest cost among `users`, so checking an unknown
    user costs as long as checking the slowest known one. Built, not hashed: at cost 31 hashing
    would take days.
    """
    cost = max((bcrypt_cost(hashed) for hashed in users.values()), default=BCRYPT_COSTS.start)
    return b"$2b$%02d$" % cost + b"." * 53


class Verdict(enum.Enum):
    PASS = "pass"
    REFUSE = "refuse"  # 401
    BUSY = "busy"  # 503: this client has BCRYPT_PER_CLIENT checks under way or waiting already


@dataclass(frozen=True, slots=True)
class Attempt:
    """One request's credentials, with the hash they are checked against (the decoy for an unknown user)."""

    password: bytes
    hashed: bytes
    known: bool
    key: bytes  # what a verified attempt is cached by: a digest, never the password


class BasicAuthMiddleware:
    """ASGI middleware: with users configured, every HTTP request needs one of their credentials, else 401.

    A missing header, an unknown user, a wrong password and one too long for bcrypt get the same
    answer, and an unknown user still costs one bcrypt check at the highest cost among the users, so
    neither the body nor the timing says which part was wrong; a known user whose hash is cheaper
    waits out the difference (`_check`). Successful checks are cached (keyed by a digest, never the
    password) because bcrypt costs tens of milliseconds and Prometheus sends the same credentials
    every scrape; `verified` tells the request limit which requests are such scrapes (their own lane).
    bcrypt work is bounded: BCRYPT_AT_ONCE checks at a time, and BCRYPT_PER_CLIENT under way or waiting
    per client address, beyond which a request gets 503 at once. Without users every request passes;
    `replace_users` changes them in place (SIGHUP).
    """

    def __init__(self, app: ASGIApp, users: Mapping[str, bytes]) -> None:
        import bcrypt

        self._app = app
        self._checkpw = bcrypt.checkpw
        self._checks = asyncio.Semaphore(BCRYPT_AT_ONCE)
        self._pending: Counter[str] = Counter()
        self.replace_users(users)

    def replace_users(self, users: Mapping[str, bytes]) -> None:
        self._users = dict(users)
        self._decoy = decoy_hash(self._users)
        self._full_cost = bcrypt_cost(self._decoy)
        self._full_check: float | None = None  # seconds the latest check at the full cost took
        self._verified: set[bytes] = set()
        costs = {bcrypt_cost(hashed) for hashed in self._users.values()}
        if len(costs) > 1 and self._full_cost <= MEASURED_COSTS:
            threading.Thread(target=self._measure_full_cost, args=(self._decoy,), daemon=True,
                             name="trainmon-bcrypt-cost").start()

    def _measure_full_cost(self, decoy: bytes) -> None:
        """With mixed costs: time one check at the full cost, before any client makes one."""
        started = time.monotonic()
        self._checkpw(b"", decoy)
        if decoy == self._decoy and self._full_check is None:
            self._full_check = time.monotonic() - started

    @property
    def has_users(self) -> bool:
        return bool(self._users)

    def verified(self, scope: Scope) -> bool:
        """Whether the request carries credentials verified before: answering it costs no bcrypt work."""
        attempt = self._attempt(scope)
        return attempt is not None and attempt.key in self._verified

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        verdict = Verdict.PASS if scope["type"] == "lifespan" or not self._users else await self._authorized(scope)
        if verdict is Verdict.PASS:
            await self._app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation
            return
        if verdict is Verdict.BUSY:
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"retry-after", b"1")]})
            await send({"type": "http.response.body", "body": b"too many password checks from this client\n"})
            return
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"www-authenticate", REALM_CHALLENGE), (b"content-type", b"text/plain; charset=utf-8")]})
        await send({"type": "http.response.body", "body": b"Unauthorized\n"})

    def _attempt(self, scope: Scope) -> Attempt | None:
        credentials = _basic_credentials(scope)
        if credentials is None:
            return None
        user, password = credentials
        if len(password) > BCRYPT_MAX_PASSWORD:
            return None
        hashed = self._decoy
        known = False
        for name, candidate in self._users.items():  # compare every name, in constant time each
            if hmac.compare_digest(name.encode(), user):
                hashed, known = candidate, True
        return Attempt(password, hashed, known, hashlib.sha256(b"\0".join((user, hashed, password))).digest())

    async def _authorized(self, scope: Scope) -> Verdict:
        attempt = self._attempt(scope)
        if attempt is None:
            return Verdict.REFUSE
        if attempt.key in self._verified:
            return Verdict.PASS
        client = str((scope.get("client") or ("",))[0])
        if self._pending[client] >= BCRYPT_PER_CLIENT:
            return Verdict.BUSY
        self._pending[client] += 1
        try:
            ok, wait = await self._check(attempt.password, attempt.hashed)
        finally:
            self._pending[client] -= 1
            if not self._pending[client]:
                del self._pending[client]
        await asyncio.sleep(wait)  # outside the bounds: waiting costs no CPU
        if ok and attempt.known:
            if len(self._verified) >= SUCCESS_CACHE_SIZE:
                self._verified.clear()
            self._verified.add(attempt.key)
            return Verdict.PASS
        return Verdict.REFUSE

    async def _check(self, password: bytes, hashed: bytes) -> tuple[bool, float]:
        """bcrypt's check, and the seconds to wait before answering so that the answer comes no sooner than
        one at the full cost would: a user whose hash is cheaper than the decoy is not told apart by time.
        The full cost's time is the latest such check's (`_measure_full_cost` makes one at start-up)."""
        async with self._checks:
            ok, spent = await self._timed_check(password, hashed)
        if bcrypt_cost(hashed) >= self._full_cost:
            self._full_check = spent
            return ok, 0.0
        return ok, max(0.0, (self._full_check or 0.0) - spent)

    async def _timed_check(self, password: bytes, hashed: bytes) -> tuple[bool, float]:
        started = time.monotonic()
        ok = bool(await asyncio.to_thread(self._checkpw, password, hashed))
        return ok, time.monotonic() - started


def _basic_credentials(scope: Scope) -> tuple[bytes, bytes] | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, encoded = value.partition(b" ")
            if scheme.lower() != b"basic":
                return None
            try:
                decoded = base64.b64decode(encoded.strip(), validate=True)
            except binascii.Error:
                return None
            user, sep, password = decoded.partition(b":")
            return (user, password) if sep else None
    return None
