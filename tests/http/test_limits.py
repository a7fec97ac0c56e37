"""--web-max-requests: requests beyond it are answered 503 at once, and the count frees when they finish."""

from __future__ import annotations

import base64
import http.client
from pathlib import Path

import bcrypt
import httpx

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import wait_until

# Cost 14 keeps a wrong-password check busy for seconds: long enough to hold two requests in flight.
SLOW_HASH = bcrypt.hashpw(b"right", bcrypt.gensalt(14)).decode()
FAST_HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()


def wrong_login(port: int) -> http.client.HTTPConnection:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    token = base64.b64encode(b"prometheus:wrong").decode()
    connection.request("GET", "/metrics", headers={"Authorization": f"Basic {token}"})
    return connection


def refused(daemon: Daemon) -> httpx.Response | None:
    response = daemon.get("/healthz", auth=("probe", "pw"))
    return response if 503 == response.status_code else None


def test_requests_beyond_the_limit_get_503_at_once(tmp_path: Path, daemons: list[Daemon]) -> None:
    """Two slow logins in flight under --web-max-requests 2: a third request is refused, a later one is not."""
    web_config = tmp_path / "web.yml"
    web_config.write_text(f"basic_auth_users:\n  prometheus: '{SLOW_HASH}'\n  probe: '{FAST_HASH}'\n")
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "nvme", "--web-config", str(web_config),
                                                     "--web-max-requests", "2"], wait_ready=False,
                                          client={"auth": ("probe", "pw")}))
    in_flight = [wrong_login(daemon.port) for _ in range(2)]
    # Counted as soon as their headers arrive, and held for seconds by bcrypt: polled, not slept on, as under
    # load the two may take any time to be dispatched.
    third = wait_until(lambda: refused(daemon), timeout=30, interval=0.02)
    assert isinstance(third, httpx.Response)
    first_two = [c.getresponse().status for c in in_flight]
    after = daemon.get("/healthz", auth=("probe", "pw"))

    assert "--web-max-requests" in third.text
    assert "1" == third.headers["retry-after"]
    assert [401, 401] == first_two
    assert 200 == after.status_code
