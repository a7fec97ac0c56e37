"""`trainmon diagnose` as a user runs it, against a real loopback HTTP server that answers badly.

Whatever the server does (drips, cuts the answer short, answers too much, labels a rank `abc`, says
+Inf), diagnose ends by its deadline, exits 2 with one line on stderr and no traceback when it cannot
use the answer, and prints strict JSON when it can.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.torch.jobs import REPO

Reply = Callable[[BaseHTTPRequestHandler, str, threading.Event], None]
DRIP_SECONDS = 0.2
NOW = time.time()


@contextmanager
def prometheus(reply: Reply) -> Iterator[str]:
    """A server on a free loopback port that answers every GET with `reply(handler, query, stopping)`."""
    stopping = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("query", [""])[0]
            with suppress(BrokenPipeError, ConnectionResetError):  # diagnose hung up: what these tests want
                reply(self, query, stopping)
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stopping.set()
        server.shutdown()
        server.server_close()
        thread.join()


def diagnose(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainmon", "diagnose", "--prometheus", url, "--job", "j",
                           "--since", "1h", *extra], capture_output=True, text=True, timeout=120, cwd=REPO)


def headers(handler: BaseHTTPRequestHandler, length: int | None) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    if length is not None:
        handler.send_header("Content-Length", str(length))
    handler.end_headers()


def drip_body(handler: BaseHTTPRequestHandler, query: str, stopping: threading.Event) -> None:
    headers(handler, 100_000)
    while not stopping.wait(DRIP_SECONDS):
        handler.wfile.write(b" ")
        handler.wfile.flush()


def drip_headers(handler: BaseHTTPRequestHandler, query: str, stopping: threading.Event) -> None:
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
    while not stopping.wait(DRIP_SECONDS):
        handler.wfile.write(b"x")
        handler.wfile.flush()


def cut_short(handler: BaseHTTPRequestHandler, query: str, stopping: threading.Event) -> None:
    headers(handler, 1000)
    handler.wfile.write(b'{"status":"succ')


def bad_status(handler: BaseHTTPRequestHandler, query: str, stopping: threading.Event) -> None:
    handler.wfile.write(b"HTTP/1.1 two hundred\r\n\r\n")


def error_with_escapes(handler: BaseHTTPRequestHandler, query: str, stopping: threading.Event) -> None:
    body = json.dumps({"status": "error", "error": "bad\nquery \x1b[2J\x1b[31mred"}).encode()
    handler.send_response(400)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def declared_huge(handler: BaseHTTPRequestHandler, query: str, stopping: threading.Event) -> None:
    headers(handler, 300_000_000)
    while not stopping.is_set():
        handler.wfile.write(b" " * 65536)


def streamed_huge(handler: BaseHTTPRequestHandler, query: str, stopping: threading.Event) -> None:
    headers(handler, None)  # no length: read until the server closes, so counted while read
    for _ in range(65 * 16):
        handler.wfile.write(b" " * 65536)


@pytest.mark.parametrize(("reply", "timeout", "says"), [
    (drip_body, "1", "gave no complete answer within 1 s (--timeout sets the limit)"),
    (drip_headers, "1", "gave no complete answer within 1 s (--timeout sets the limit)"),
    (cut_short, "60", "cut its answer short: IncompleteRead (15 of 1000 bytes)"),
    (bad_status, "60", "answered malformed HTTP: BadStatusLine"),
    (error_with_escapes, "60", "query failed: bad query [2J [31mred"),  # no newline, no escape reaches a terminal
    (declared_huge, "60", "answered over 64 MiB: refused"),
    (streamed_huge, "60", "answered over 64 MiB: refused"),
])
def test_an_answer_it_cannot_use_is_exit_2_with_one_line(reply: Reply, timeout: str, says: str) -> None:
    with prometheus(reply) as url:
        result = diagnose(url, "--timeout", timeout)

    assert 2 == result.returncode, result.stderr
    assert says in result.stderr
    assert 1 == len(result.stderr.splitlines()), result.stderr
    assert "Traceback" not in result.stderr
    assert "\x1b" not in result.stderr
    assert "" == result.stdout


def vector(*series: tuple[dict[str, str], str]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [NOW, value]} for labels, value in series]}}).encode()


def answers(series: dict[str, tuple[tuple[dict[str, str], str], ...]]) -> Reply:
    """A Prometheus whose answer to a query holding a key of `series` (the first, in order) is those series."""
    def reply(handler: BaseHTTPRequestHandler, query: str, stopping: threading.Event) -> None:
        body = vector(*next((found for key, found in series.items() if key in query), ()))
        headers(handler, len(body))
        handler.wfile.write(body)
    return reply


def ranks(*labels: str) -> tuple[tuple[dict[str, str], str], ...]:
    return tuple(({"instance": "n1:9842", "rank": rank, "uuid": f"GPU-{rank}"}, "1") for rank in labels)


BAD_RANKS = ("abc", "1e400", "-1", "9" * 40, "\u0663")


def test_rank_labels_that_are_not_rank_numbers_are_skipped_and_said_once() -> None:
    one = ranks("0")[0][0]
    job = {"last_over_time(trainmon_train_rank_info": ranks("0", *BAD_RANKS),
           "trainmon_train_step_duration_seconds_sum": ((one, "3000"), *ranks(*BAD_RANKS))}
    with prometheus(answers(job)) as url:
        result = diagnose(url)

    assert 0 == result.returncode, result.stderr
    assert [f"trainmon diagnose: skipped {len(BAD_RANKS)} rank(s) whose rank label is not a rank number "
            f"(such as '-1' on 'n1:9842')"] == result.stderr.splitlines()
    assert "1 rank(s)" in result.stdout


def test_a_job_with_only_unusable_rank_labels_has_no_series_in_one_line() -> None:
    with prometheus(answers({"last_over_time(trainmon_train_rank_info": ranks(*BAD_RANKS)})) as url:
        result = diagnose(url)

    assert 2 == result.returncode
    (line,) = result.stderr.splitlines()
    assert "has no trainmon_train_rank_info of job_id 'j'" in line
    assert f"skipped {len(BAD_RANKS)} rank(s)" in line


def test_a_rank_that_starts_after_now_and_infinite_values_still_give_strict_json() -> None:
    """Rank 0's process starts in an hour (a node's clock ahead) and reports FLOPs on a GPU of known peak;
    rank 1 waits for data half its time while its node's mount went from 1 ms per RPC to +Inf (time with no
    RPC); rank 0's data wait is -Inf, no time at all."""
    zero, one = ranks("0")[0][0], ranks("1")[0][0]
    mount = {"instance": "n1:9842", "mount": "/lustre"}
    job = {"last_over_time(trainmon_train_rank_info": ranks("0", "1"),
           "trainmon_train_process_start_timestamp_seconds": ((zero, str(NOW + 3600)),),
           "trainmon_train_model_flops_total": ((zero, "1e18"),),
           "trainmon_gpu_peak_flops": (({"instance": "n1:9842", "uuid": "GPU-0"}, "989e12"),),
           "trainmon_train_step_duration_seconds_sum": ((one, "3000"),),
           "trainmon_train_dataloader_wait_seconds_total": ((one, "1800"), (zero, "-Inf")),
           "offset": ((mount, "0.001"),),
           "trainmon_fs_rpc_seconds_total": ((mount, "+Inf"),)}
    with prometheus(answers(job)) as url:
        result = diagnose(url, "--json")

    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    document = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"not JSON: {name}"))
    assert document["mfu"] is None
    assert [None] == [f["signals"]["rpc_latency_seconds"] for f in document["findings"] if f["cause"] == "storage"]
