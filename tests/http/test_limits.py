"""--web-max-requests: requests beyond it are answered 503 at once, and the count frees when they finish."""

from __future__ import annotations

import base64
import http.client
import time
from pathlib import Path

import bcrypt

from tests.helpers.daemon import start_daemon

# Cost 14 keeps a wrong-password check busy for seconds: long enough to hold two requests in flight.
SLOW_HASH = bcrypt.hashpw(b"right", bcrypt.gensalt(14)).decode()
FAST_HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()


def wrong_login(port: int) -> http.client.HTTPConnection:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    token = base64.b64encode(b"prometheus:wrong").decode()
    connection.request("GET", "/metrics", headers={"Authorization": f"Basic {token}"})
    return connection


def test_requests_beyond_the_limit_get_503_at_once(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    """Two slow logins in flight under --web-max-requests 2: a third request is refused, a later one is not."""
    web_config = tmp_path / "web.yml"
    web_config.write_text(f"basic_auth_users:\n  prometheus: '{SLOW_HASH}'\n  probe: '{FAST_HASH}'\n")
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "nvme", "--web-config", str(web_config),
                                                     "--web-max-requests", "2"], wait_ready=False,
                                          client={"auth": ("probe", "pw")}))
    in_flight = [wrong_login(daemon.port) for _ in range(2)]
    time.sleep(0.5)  # both are dispatched (and counted) as soon as their headers arrive

    third = daemon.get("/healthz", auth=("probe", "pw"))
    first_two = [c.getresponse().status for c in in_flight]
    after = daemon.get("/healthz", auth=("probe", "pw"))

    assert 503 == third.status_code
    assert "--web-max-requests" in third.text
    assert "1" == third.headers["retry-after"]
    assert [401, 401] == first_two
    assert 200 == after.status_code
