"""`--web-config FILE`: TLS and basic auth in the exporter-toolkit web-config format.

The file is the one node_exporter and dcgm-exporter read (`promtool check web-config` checks it)::

    tls_server_config:
      cert_file: server.crt            # relative paths are relative to the file's directory
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt
      min_version: TLS12
    basic_auth_users:
      prometheus: $2y$10$...           # bcrypt hash, e.g. `htpasswd -nBC 10 "" | tr -d ':\\n'`

It is read at start-up, where a bad file stops the daemon, and again on SIGHUP, where a bad file
is logged and the running one kept. Keys of the format that trainmon does not implement (cipher
suites, curves, HTTP headers, rate limits) are refused rather than ignored, as are
`RequestClientCert` and `RequireAnyClientCert` (Python's `ssl` cannot ask for a client certificate
without verifying it), bcrypt costs outside 4-31, an empty `tls_server_config`, and TLS versions
this machine's OpenSSL will not negotiate.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import enum
import hashlib
import hmac
import re
import ssl
import threading
import time
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmon.errors import ConfigError

FLAG = "web-config"

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
VERSION_NAMES = {version: name for name, version in TLS_VERSIONS.items()}
# client_auth_type -> what the server asks of the client; the two missing Go modes cannot be built.
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")

TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
# Keys of the exporter-toolkit format that trainmon does not implement: refused, never ignored.
UNSUPPORTED_KEYS = {
    "cert", "key", "client_ca", "client_allowed_sans", "cipher_suites", "curve_preferences",
    "prefer_server_cipher_suites", "http_server_config", "rate_limit",
}
TOP_KEYS = {"tls_server_config", "basic_auth_users"}

BCRYPT_HASH = re.compile(r"\$2[abxy]\$(\d{2})\$[./A-Za-z0-9]{53}")
BCRYPT_COSTS = range(4, 32)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsServerConfig:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WebConfig:
    tls: TlsServerConfig | None = None
    # user -> bcrypt hash; empty means no authentication.
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)
    # Built from `tls` by `load_web_config`; None serves plain HTTP.
    ssl_context: ssl.SSLContext | None = None


def load_web_config(path: Path) -> WebConfig:
    """Read and validate a web-config file and build its TLS context, so a bad file fails start-up.

    Raises:
        ConfigError: the file is unreadable, is not the format, names a file that does not load,
            or asks for something trainmon cannot do. The message is one line.
    """
    try:
        import yaml
    except ImportError:
        raise ConfigError(FLAG, str(path), "needs PyYAML: pip install pyyaml") from None

    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(FLAG, str(path), f"cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(FLAG, str(path), f"not YAML: {' '.join(str(exc).split())}") from None
    config = parse_web_config(path, document or {})
    if config.tls is None:
        return config
    return dataclasses.replace(config, ssl_context=ssl_context(path, config.tls))


def parse_web_config(path: Path, document: object) -> WebConfig:
    """Turn a loaded YAML document into a `WebConfig`; relative file names resolve against `path`'s folder."""
    top = _mapping(path, "the file", document, TOP_KEYS)
    if "tls_server_config" in top and not top["tls_server_config"]:
        # exporter-toolkit serves plain HTTP here: someone who wrote the key meant TLS.
        raise ConfigError(FLAG, str(path), "tls_server_config is empty; give cert_file and key_file, "
                          "or remove the key to serve plain HTTP")
    tls = _parse_tls(path, top["tls_server_config"]) if "tls_server_config" in top else None
    users_doc = _mapping(path, "basic_auth_users", top.get("basic_auth_users") or {}, None)
    users: dict[str, bytes] = {}
    for user, hashed in users_doc.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise ConfigError(FLAG, str(path), f"basic_auth_users: bad user name {user!r}")
        match = BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None:
            raise ConfigError(FLAG, str(path), f"basic_auth_users: {user}: expected a bcrypt hash ($2y$...)")
        if int(match[1]) not in BCRYPT_COSTS:
            raise ConfigError(FLAG, str(path), f"basic_auth_users: {user}: bcrypt cost {match[1]} is outside "
                              f"{BCRYPT_COSTS.start}-{BCRYPT_COSTS.stop - 1}")
        users[user] = match[0].encode()
    return WebConfig(tls=tls, basic_auth_users=users)


def _mapping(path: Path, where: str, value: object, allowed: set[str] | None) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise ConfigError(FLAG, str(path), f"{where}: expected a mapping")
    if allowed is not None:
        for key in value:
            if key in UNSUPPORTED_KEYS:
                raise ConfigError(FLAG, str(path), f"{where}: {key} is not supported by trainmon")
            if key not in allowed:
                raise ConfigError(FLAG, str(path), f"{where}: unknown key {key!r}")
    return value


def _parse_tls(path: Path, document: object) -> TlsServerConfig:
    doc = _mapping(path, "tls_server_config", document, TLS_KEYS)

    def text(key: str) -> str | None:
        value = doc.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(FLAG, str(path), f"tls_server_config: {key}: expected a string")
        return value or None

    def file(key: str) -> Path | None:
        name = text(key)
        return path.parent / name if name else None

    cert_file, key_file, ca_file = file("cert_file"), file("key_file"), file("client_ca_file")
    if cert_file is None or key_file is None:
        raise ConfigError(FLAG, str(path), "tls_server_config: cert_file and key_file are both required")
    auth = text("client_auth_type") or "NoClientCert"
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise ConfigError(FLAG, str(path), f"tls_server_config: client_auth_type {auth} is not supported "
                          "(Python's ssl cannot request a client certificate without verifying it); "
                          "use VerifyClientCertIfGiven or RequireAndVerifyClientCert")
    if auth not in CLIENT_AUTH:
        raise ConfigError(FLAG, str(path), f"tls_server_config: unknown client_auth_type {auth!r}; "
                          f"known: {', '.join(CLIENT_AUTH)}")
    if auth == "NoClientCert" and ca_file is not None:
        raise ConfigError(FLAG, str(path), "tls_server_config: client_ca_file is set but client_auth_type "
                          "is NoClientCert; set client_auth_type: RequireAndVerifyClientCert")
    if auth != "NoClientCert" and ca_file is None:
        raise ConfigError(FLAG, str(path), f"tls_server_config: client_auth_type {auth} needs client_ca_file")
    min_version = _tls_version(path, "min_version", text("min_version") or "TLS12")
    max_text = text("max_version")
    max_version = _tls_version(path, "max_version", max_text) if max_text else None
    if max_version is not None and max_version < min_version:
        raise ConfigError(FLAG, str(path), "tls_server_config: max_version is below min_version")
    return TlsServerConfig(cert_file=cert_file, key_file=key_file, client_auth_type=auth,
                           client_ca_file=ca_file, min_version=min_version, max_version=max_version)


def _tls_version(path: Path, key: str, name: str) -> ssl.TLSVersion:
    try:
        return TLS_VERSIONS[name]
    except KeyError:
        raise ConfigError(FLAG, str(path), f"tls_server_config: {key}: unknown TLS version {name!r}; "
                          f"known: {', '.join(TLS_VERSIONS)}") from None


def ssl_context(path: Path, tls: TlsServerConfig) -> ssl.SSLContext:
    """Build the server's `SSLContext` (uvicorn's own has no minimum-version option).

    Raises:
        ConfigError: a certificate, key or CA file does not load, or a TLS version will not negotiate.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(FLAG, str(path), f"tls_server_config: cannot load cert_file {tls.cert_file} "
                          f"with key_file {tls.key_file}: {exc}") from None
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(FLAG, str(path), f"tls_server_config: cannot load client_ca_file "
                              f"{tls.client_ca_file}: {exc}") from None
    context.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    for key, version in (("min_version", tls.min_version), ("max_version", tls.max_version)):
        if version is not None and not negotiates(tls, version):
            raise ConfigError(FLAG, str(path), f"tls_server_config: {key}: {VERSION_NAMES[version]} cannot be "
                              f"honoured: this machine's {ssl.OPENSSL_VERSION} will not negotiate it; "
                              "use TLS12 or TLS13")
    limit_versions(context, tls.min_version, tls.max_version)
    return context


def limit_versions(context: ssl.SSLContext, minimum: ssl.TLSVersion, maximum: ssl.TLSVersion | None) -> None:
    with warnings.catch_warnings():  # Python deprecates TLSv1 and TLSv1_1; a machine that negotiates them may ask
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = minimum
        if maximum is not None:
            context.maximum_version = maximum


def negotiates(tls: TlsServerConfig, version: ssl.TLSVersion) -> bool:
    """Whether a handshake at exactly `version` succeeds with this certificate, in memory.

    OpenSSL 3 at its default security level will not do TLS 1.0 or 1.1 even when asked to, so a
    `min_version: TLS10` would silently mean TLS 1.2; only a real handshake tells.
    """
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    for context in (server, client):
        limit_versions(context, version, version)
    server.load_cert_chain(tls.cert_file, tls.key_file)
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    sides = [client.wrap_bio(to_client, to_server), server.wrap_bio(to_server, to_client, server_side=True)]
    for _ in range(8):  # TLS 1.2 needs two round trips, 1.3 one and a half
        for side in list(sides):
            try:
                side.do_handshake()
                sides.remove(side)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:
                return False
        if not sides:
            return True
    return False


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
