"""`trainmon.webconfig`: the exporter-toolkit web-config file, parsed and checked before serving."""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from tests.helpers.tools import require_tool
from tests.http.test_tls import Pki, make_pki
from trainmon.errors import ConfigError
from trainmon.http.auth import BasicAuthMiddleware, decoy_hash
from trainmon.webconfig import load_web_config

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "deploy" / "web-config.yml"
HASH = "$2b$04$o3bpE7xoJgFhfVt/wPuEjeJpul95KCJQB1rQbgnmqgsuoIsoRfR1S"  # bcrypt of "pw", cost 4


AB = "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return path


def tls_block(pki: Pki, extra: str = "") -> str:
    return f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n{extra}"


def test_sample_passes_promtool_and_trainmon(tmp_path: Path, pki: Pki) -> None:
    """deploy/web-config.yml is valid for Prometheus' own checker and for trainmon alike."""
    promtool = require_tool("promtool")
    shutil.copy(SAMPLE, tmp_path / "web-config.yml")
    (tmp_path / "tls").mkdir()
    names = {"tls.crt": pki.server_cert, "tls.key": pki.server_key, "client-ca.crt": pki.ca}
    for name, source in names.items():
        shutil.copy(source, tmp_path / "tls" / name)

    checked = subprocess.run([promtool, "check", "web-config", str(tmp_path / "web-config.yml")],
                             capture_output=True, text=True, timeout=60)
    config = load_web_config(tmp_path / "web-config.yml")

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert config.tls is not None
    assert config.tls.cert_file == tmp_path / "tls" / "tls.crt"
    assert config.tls.client_auth_type == "RequireAndVerifyClientCert"
    assert list(config.basic_auth_users) == ["prometheus"]


def test_empty_file_means_plain_http_without_auth(tmp_path: Path) -> None:
    """An empty web config changes nothing, as in exporter-toolkit."""
    config = load_web_config(write(tmp_path, ""))

    assert config.tls is None
    assert dict(config.basic_auth_users) == {}


def test_relative_paths_resolve_against_the_file(tmp_path: Path, pki: Pki) -> None:
    """cert_file: server.crt next to the config file is found whatever the working directory."""
    for source in (pki.server_cert, pki.server_key):
        shutil.copy(source, tmp_path / source.name)

    config = load_web_config(write(tmp_path, "tls_server_config:\n  cert_file: server.crt\n"
                                             "  key_file: server.key\n  min_version: TLS13\n"))

    assert config.tls is not None
    assert config.tls.key_file == tmp_path / "server.key"
    assert config.tls.min_version == ssl.TLSVersion.TLSv1_3


@pytest.mark.parametrize(("text", "message"), [
    ("tls_server_config: [\n", "not YAML"),
    ("- a\n", "expected a mapping"),
    ("tls_server_config:\n  cert_file: a.crt\n",
     "cert_file and key_file are both required"),
    (AB + "  client_auth_type: RequestClientCert\n"
     "  client_ca_file: ca.crt\n", "RequestClientCert is not supported"),
    (AB + "  client_auth_type: Sometimes\n",
     "unknown client_auth_type"),
    (AB + "  client_ca_file: ca.crt\n",
     "client_ca_file is set but client_auth_type is NoClientCert"),
    (AB + "  client_auth_type: RequireAndVerifyClientCert\n",
     "needs client_ca_file"),
    (AB + "  min_version: TLS14\n", "unknown TLS version"),
    (AB + "  min_version: TLS13\n  max_version: TLS12\n",
     "max_version is below min_version"),
    (AB + "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
     "cipher_suites is not supported"),
    (AB + "  cert_fle: x\n", "unknown key 'cert_fle'"),
    ("http_server_config:\n  http2: false\n", "http_server_config is not supported"),
    ("basic_auth_users:\n  prometheus: plaintext\n", "expected a bcrypt hash"),
    ("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n", "cannot load cert_file"),
    ("tls_server_config: {}\n", "tls_server_config is empty"),
    ("tls_server_config:\n", "tls_server_config is empty"),
    (f"basic_auth_users:\n  prometheus: '{HASH.replace('$04$', '$03$')}'\n", "bcrypt cost 03 is outside 4-31"),
    (f"basic_auth_users:\n  prometheus: '{HASH.replace('$04$', '$99$')}'\n", "bcrypt cost 99 is outside 4-31"),
])
def test_bad_config_is_one_clear_config_error(tmp_path: Path, text: str, message: str) -> None:
    """Every mistake raises ConfigError naming --web-config, the file and the problem, on one line."""
    path = write(tmp_path, text)

    with pytest.raises(ConfigError) as caught:
        load_web_config(path)

    assert caught.value.flag == "web-config"
    assert message in str(caught.value)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_key_that_does_not_match_the_certificate_is_refused(tmp_path: Path, pki: Pki) -> None:
    """The SSL context is built while loading, so a wrong key fails start-up, not the first scrape."""
    path = write(tmp_path, f"tls_server_config:\n  cert_file: {pki.server_cert}\n"
                           f"  key_file: {pki.client_key}\n")

    with pytest.raises(ConfigError, match="cannot load cert_file"):
        load_web_config(path)


def test_bcrypt_users_are_kept_as_hashes(tmp_path: Path, pki: Pki) -> None:
    """basic_auth_users maps each user to the bytes of their hash."""
    config = load_web_config(write(tmp_path, tls_block(pki) + f"basic_auth_users:\n  alice: '{HASH}'\n"))

    assert dict(config.basic_auth_users) == {"alice": HASH.encode()}


def test_the_decoy_for_unknown_users_has_the_highest_cost_and_costs_nothing_to_build(tmp_path: Path) -> None:
    """At cost 31 hashing a decoy would take days (start-up hung); the decoy is built, at the top cost."""
    users = {"fast": HASH.encode(), "slow": HASH.replace("$04$", "$31$").encode(),
             "mid": HASH.replace("$04$", "$12$").encode()}

    decoy = decoy_hash(users)
    BasicAuthMiddleware(lambda *_: None, users)  # type: ignore[arg-type, return-value]

    assert decoy.startswith(b"$2b$31$")
    assert decoy_hash({"fast": HASH.encode()}).startswith(b"$2b$04$")
    assert not bcrypt_checks(b"pw", decoy_hash({"fast": HASH.encode()}))


def bcrypt_checks(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    return bool(bcrypt.checkpw(password, hashed))


def handshake_over_loopback(pki: Pki, version: ssl.TLSVersion) -> bool:
    """An independent check of what this machine's OpenSSL negotiates: a real socket pair at `version`."""
    server_context, client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for context in (server_context, client_context):
            context.minimum_version = context.maximum_version = version
    server_context.load_cert_chain(pki.server_cert, pki.server_key)
    client_context.check_hostname, client_context.verify_mode = False, ssl.CERT_NONE
    left, right = socket.socketpair()
    outcome: list[bool] = []

    def serve() -> None:
        try:
            with server_context.wrap_socket(right, server_side=True):
                outcome.append(True)
        except (ssl.SSLError, OSError):
            outcome.append(False)

    server = threading.Thread(target=serve)
    server.start()
    try:
        with client_context.wrap_socket(left):
            client_ok = True
    except (ssl.SSLError, OSError):
        client_ok = False
    finally:
        left.close()
    server.join(10)
    right.close()
    return client_ok and outcome == [True]


@pytest.mark.parametrize(("key", "name", "version"), [
    ("min_version", "TLS10", ssl.TLSVersion.TLSv1), ("min_version", "TLS11", ssl.TLSVersion.TLSv1_1),
    ("max_version", "TLS12", ssl.TLSVersion.TLSv1_2), ("min_version", "TLS13", ssl.TLSVersion.TLSv1_3),
])
def test_a_tls_version_is_accepted_only_if_this_machine_negotiates_it(tmp_path: Path, pki: Pki, key: str,
                                                                      name: str, version: ssl.TLSVersion) -> None:
    """min_version TLS10 used to load and then mean TLS 1.2 (OpenSSL 3 refuses 1.0); now it is refused."""
    path = write(tmp_path, tls_block(pki, f"  {key}: {name}\n"))
    negotiable = handshake_over_loopback(pki, version)

    if negotiable:
        assert load_web_config(path).tls is not None
    else:
        with pytest.raises(ConfigError, match=f"{key}: {name} cannot be honoured"):
            load_web_config(path)
    if ssl.OPENSSL_VERSION_INFO >= (3,) and version < ssl.TLSVersion.TLSv1_2:
        assert not negotiable  # what the finding was about, on this machine


def test_an_out_of_range_bcrypt_cost_stops_start_up_with_one_line(tmp_path: Path) -> None:
    """Cost 03 used to crash start-up with a traceback and exit 1."""
    config = write(tmp_path, f"basic_auth_users:\n  prometheus: '{HASH.replace('$04$', '$03$')}'\n")

    result = subprocess.run([sys.executable, "-m", "trainmon", "serve", "--listen", "127.0.0.1:1",
                             "--ingest-socket", "", "--web-config", str(config)],
                            capture_output=True, text=True, timeout=30)

    assert 2 == result.returncode, result.stderr
    assert [f"trainmon: error: --web-config='{config}': basic_auth_users: prometheus: bcrypt cost 03 is "
            "outside 4-31"] == result.stderr.strip().splitlines()


def test_daemon_extra_brings_what_web_config_needs() -> None:
    """`pip install 'trainmon[daemon]'` alone (the container image) can read a web config and check bcrypt."""
    import tomllib  # type: ignore[import-not-found,unused-ignore]  # Python >= 3.11

    daemon = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["daemon"]
    names = {re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower() for requirement in daemon}

    assert {"pyyaml", "bcrypt"} <= names
