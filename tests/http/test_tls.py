"""`trainmon serve --web-config`: real TLS and basic auth against a running daemon."""

from __future__ import annotations

import datetime
import ipaddress
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port, wait_until

PASSWORD = "s3cret pass"


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all as PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def make_pki(directory: Path) -> Pki:
    """Issue a throwaway CA and two leaf certificates under `directory`."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    valid_from, valid_to = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    ca_usage = x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                             data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                             encipher_only=False, decipher_only=False)
    ca_name = _name("trainmon test CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(valid_from).not_valid_after(valid_to)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(ca_usage, critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    pki = Pki(ca=directory / "ca.crt", server_cert=directory / "server.crt",
              server_key=directory / "server.key", client_cert=directory / "client.crt",
              client_key=directory / "client.key")
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for common_name, cert_path, key_path, usage in (
        ("127.0.0.1", pki.server_cert, pki.server_key, ExtendedKeyUsageOID.SERVER_AUTH),
        ("prometheus", pki.client_cert, pki.client_key, ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(valid_from).not_valid_after(valid_to)
                .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                            x509.DNSName("localhost")]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
    return pki


def client_context(pki: Pki, with_cert: bool = False,
                   max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.ca)
    if with_cert:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    if max_version is not None:
        context.maximum_version = max_version
    return context


def write_web_config(path: Path, pki: Pki, *, client_auth: str = "NoClientCert", min_version: str = "TLS12",
                     users: dict[str, str] | None = None) -> Path:
    lines = ["tls_server_config:", f"  cert_file: {pki.server_cert.name}",
             f"  key_file: {pki.server_key.name}", f"  client_auth_type: {client_auth}",
             f"  min_version: {min_version}"]
    if client_auth != "NoClientCert":
        lines.append(f"  client_ca_file: {pki.ca.name}")
    if users:
        lines.append("basic_auth_users:")
        lines += [f"  {user}: '{hashed}'" for user, hashed in users.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def https_daemon(tmp_path: Path, web_config: Path, pki: Pki, with_cert: bool = False,
                 auth: tuple[str, str] | None = None, args: Sequence[str] = ()) -> Daemon:
    """Start a daemon behind `web_config`, probed for readiness over TLS with these credentials."""
    client = {"verify": client_context(pki, with_cert=with_cert), "auth": auth}
    return start_daemon(tmp_path, ["--collectors", "nvme", "--web-config", str(web_config), *args], scheme="https",
                        wait_ready=False, client=client)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def basic_auth_daemon(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Daemon]:
    tmp_path = tmp_path_factory.mktemp("basic")
    for path in (pki.ca, pki.server_cert, pki.server_key):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    config = write_web_config(tmp_path / "web.yml", pki, users={"prometheus": hashed})
    daemon = https_daemon(tmp_path, config, pki, auth=("prometheus", PASSWORD))
    yield daemon
    daemon.stop()


def test_right_credentials_over_tls_get_200(basic_auth_daemon: Daemon, pki: Pki) -> None:
    """The right user and password, over verified TLS, reach /metrics."""
    response = httpx.get(basic_auth_daemon.url + "/metrics", verify=client_context(pki),
                         auth=("prometheus", PASSWORD), timeout=10)

    assert response.status_code == 200
    assert "trainmon_build_info" in response.text


@pytest.mark.parametrize("auth", [None, ("prometheus", "wrong"), ("nobody", PASSWORD), ("", ""),
                                  ("prometheus", PASSWORD + "x" * 73), ("nobody", "x" * 73)],
                         ids=["none", "wrong-password", "unknown-user", "empty", "73-byte-password",
                              "73-byte-password-unknown-user"])
def test_wrong_or_missing_credentials_get_the_same_401(basic_auth_daemon: Daemon, pki: Pki,
                                                       auth: tuple[str, str] | None) -> None:
    """Whatever part is wrong, the answer is one 401 with a Basic challenge (a password over bcrypt's
    72 bytes used to get a 500 and a traceback)."""
    response = httpx.get(basic_auth_daemon.url + "/metrics", verify=client_context(pki), auth=auth,
                         timeout=10)

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Basic realm="trainmon"'
    assert response.text == "Unauthorized\n"


def test_plain_http_to_the_tls_port_fails(basic_auth_daemon: Daemon) -> None:
    """The port speaks only TLS: a plain HTTP request gets no HTTP answer."""
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{basic_auth_daemon.port}/healthz", timeout=10)


def test_client_capped_below_min_version_fails_the_handshake(tmp_path: Path, pki: Pki) -> None:
    """min_version TLS13 refuses a TLS 1.2 client: the context is ours, not uvicorn's default."""
    config = write_web_config(tmp_path / "web.yml", pki, min_version="TLS13")
    for path in (pki.server_cert, pki.server_key):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    daemon = https_daemon(tmp_path, config, pki)
    try:
        tls12_only = client_context(pki, max_version=ssl.TLSVersion.TLSv1_2)
        with pytest.raises(ssl.SSLError), \
                socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as raw:
            tls12_only.wrap_socket(raw, server_hostname="127.0.0.1")
        assert httpx.get(daemon.url + "/healthz", verify=client_context(pki), timeout=10).status_code == 200
    finally:
        daemon.stop()


def test_a_tls_handshake_that_never_starts_is_closed_after_the_header_timeout(tmp_path: Path, pki: Pki) -> None:
    """asyncio gives a TLS handshake 60 s; a silent client now holds its descriptor only --web-header-timeout."""
    config = write_web_config(tmp_path / "web.yml", pki)
    for path in (pki.server_cert, pki.server_key):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    daemon = https_daemon(tmp_path, config, pki, args=["--web-header-timeout", "1"])
    try:
        with socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as silent:
            answer = silent.recv(1)
        served = httpx.get(daemon.url + "/healthz", verify=client_context(pki), timeout=10)
    finally:
        daemon.stop()

    assert b"" == answer
    assert 200 == served.status_code


def test_mutual_tls_refuses_a_client_without_certificate(tmp_path: Path, pki: Pki) -> None:
    """With RequireAndVerifyClientCert, no client certificate means no HTTP exchange at all."""
    for path in (pki.ca, pki.server_cert, pki.server_key):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    config = write_web_config(tmp_path / "web.yml", pki, client_auth="RequireAndVerifyClientCert")
    daemon = https_daemon(tmp_path, config, pki, with_cert=True)
    try:
        with_cert = httpx.get(daemon.url + "/healthz", verify=client_context(pki, with_cert=True), timeout=10)
        # TLS 1.2 fails in the handshake itself; TLS 1.3 lets the client finish first, then the
        # server drops the connection before any HTTP.
        tls12_only = client_context(pki, max_version=ssl.TLSVersion.TLSv1_2)
        with pytest.raises(ssl.SSLError), \
                socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as raw:
            tls12_only.wrap_socket(raw, server_hostname="127.0.0.1")
        with pytest.raises(httpx.TransportError):
            httpx.get(daemon.url + "/healthz", verify=client_context(pki), timeout=10)
    finally:
        daemon.stop()

    assert with_cert.status_code == 200


def test_bad_web_config_stops_start_up_with_one_line(tmp_path: Path) -> None:
    """A web config that does not parse stops the daemon with exit 2 and a one-line reason."""
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n"
                      "  client_auth_type: RequireAnyClientCert\n  client_ca_file: ca.crt\n")

    result = subprocess.run([sys.executable, "-m", "trainmon", "serve", "--listen", f"127.0.0.1:{free_port()}",
                             "--ingest-socket", "", "--web-config", str(config)],
                            capture_output=True, text=True, timeout=30)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"trainmon: error: --web-config='{config}': tls_server_config: client_auth_type "
                           "RequireAnyClientCert is not supported"), result.stderr


def test_sighup_re_reads_the_web_config_and_keeps_the_running_one_when_the_new_is_bad(
        tmp_path: Path, pki: Pki) -> None:
    """Plain HTTP with alice, then SIGHUP onto TLS with bob, then SIGHUP onto a broken file: bob stays."""
    for path in (pki.server_cert, pki.server_key):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    config = tmp_path / "web.yml"
    alice, bob = (bcrypt.hashpw(b"pw-" + name, bcrypt.gensalt(4)).decode() for name in (b"alice", b"bob"))
    config.write_text(f"basic_auth_users:\n  alice: '{alice}'\n")
    daemon = start_daemon(tmp_path, ["--collectors", "nvme", "--web-config", str(config)], wait_ready=False,
                          client={"auth": ("alice", "pw-alice")})
    https = f"https://127.0.0.1:{daemon.port}/healthz"
    try:
        write_web_config(config, pki, users={"bob": bob})
        daemon.process.send_signal(signal.SIGHUP)
        wait_until(lambda: httpx.get(https, verify=client_context(pki), auth=("bob", "pw-bob"), timeout=5)
                   .status_code == 200)
        alice_after = httpx.get(https, verify=client_context(pki), auth=("alice", "pw-alice"), timeout=5)
        with pytest.raises(httpx.TransportError):
            httpx.get(daemon.url + "/healthz", auth=("bob", "pw-bob"), timeout=5)

        config.write_text(f"basic_auth_users:\n  bob: '{bob.replace('$04$', '$03$')}'\n")
        daemon.process.send_signal(signal.SIGHUP)
        wait_until(lambda: "kept the running web config" in daemon.log())
        bob_after_bad_file = httpx.get(https, verify=client_context(pki), auth=("bob", "pw-bob"), timeout=5)
    finally:
        exit_code = daemon.stop()

    assert 401 == alice_after.status_code
    assert 200 == bob_after_bad_file.status_code
    assert 0 == exit_code
    assert "Traceback" not in daemon.log()
