"""Basic auth for the HTTP server: the ASGI middleware that checks `basic_auth_users` of `--web-config`.

The file is parsed in `trainmon.webconfig`; this module only answers requests with it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from trainmon.webconfig import BCRYPT_COSTS

# bcrypt reads at most 72 bytes of a password; bcrypt 5 raises ValueError for more.
BCRYPT_MAX_PASSWORD = 72
REALM_CHALLENGE = b'Basic realm="trainmon"'
SUCCESS_CACHE_SIZE = 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def decoy_hash(users: Mapping[str, bytes]) -> bytes:
    """A bcrypt hash no password matches, at the highest cost among `users`, so checking an unknown
    user costs as long as checking the slowest known one. Built, not hashed: at cost 31 hashing
    would take days.
    """
    cost = max((int(hashed[4:6]) for hashed in users.values()), default=BCRYPT_COSTS.start)
    return b"$2b$%02d$" % cost + b"." * 53


class BasicAuthMiddleware:
    """ASGI middleware: with users configured, every HTTP request needs one of their credentials, else 401.

    A missing header, an unknown user, a wrong password and one too long for bcrypt get the same
    answer, and an unknown user still costs one bcrypt check, so neither the body nor the timing
    says which part was wrong. Successful checks are cached (keyed by a digest, never the
    password) because bcrypt costs tens of milliseconds and Prometheus sends the same credentials
    every scrape. Without users every request passes; `replace_users` changes them in place (SIGHUP).
    """

    def __init__(self, app: ASGIApp, users: Mapping[str, bytes]) -> None:
        import bcrypt

        self._app = app
        self._checkpw = bcrypt.checkpw
        self.replace_users(users)

    def replace_users(self, users: Mapping[str, bytes]) -> None:
        self._users = dict(users)
        self._decoy = decoy_hash(self._users)
        self._verified: set[bytes] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or not self._users or await self._authorized(scope):
            await self._app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation
            return
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"www-authenticate", REALM_CHALLENGE), (b"content-type", b"text/plain; charset=utf-8")]})
        await send({"type": "http.response.body", "body": b"Unauthorized\n"})

    async def _authorized(self, scope: Scope) -> bool:
        credentials = _basic_credentials(scope)
        if credentials is None:
            return False
        user, password = credentials
        if len(password) > BCRYPT_MAX_PASSWORD:
            return False
        hashed = self._decoy
        known = False
        for name, candidate in self._users.items():  # compare every name, in constant time each
            if hmac.compare_digest(name.encode(), user):
                hashed, known = candidate, True
        key = hashlib.sha256(b"\0".join((user, hashed, password))).digest()
        if key in self._verified:
            return True
        ok = await asyncio.to_thread(self._checkpw, password, hashed)
        if ok and known:
            if len(self._verified) >= SUCCESS_CACHE_SIZE:
                self._verified.clear()
            self._verified.add(key)
        return ok and known


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
