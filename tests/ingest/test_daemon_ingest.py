"""A real daemon fed hostile datagrams over its Unix socket and UDP: it rejects, counts and stays up."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.bench.bench_cardinality import widest_report
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port, wait_until
from tests.helpers.tools import require
from tests.torch.jobs import metrics_when, samples
from trainmon import wire

VALID = wire.Report(job_id="ok", rank=0, pid=os.getpid(), start_time=1_767_000_000.0, seq=1, steps=7)


def total(text: str, name: str, **match: str) -> float:
    return sum(samples(text, name, **match).values())


def test_hostile_datagrams_are_rejected_counted_and_bounded(tmp_path: Path, daemons: list[Daemon]) -> None:
    udp_port = free_port()
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2", "--max-ranks", "16",
                                     "--ingest-udp", f"127.0.0.1:{udp_port}"])
    daemons.append(daemon)
    path = str(tmp_path / "ingest.sock")
    hostile = [b"{oops", wire.encode(VALID)[:50], b"\x00" * 100, json.dumps({"v": 1, "rank": "0"}).encode()]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as unix:
        unix.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
        unix.sendto(wire.encode(VALID), path)
        for data in hostile:
            unix.sendto(data, path)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendto(b"z" * (wire.MAX_DATAGRAM + 100), ("127.0.0.1", udp_port))
        for i in range(200):  # a flood of distinct job ids
            udp.sendto(wire.encode(wire.Report(job_id=f"flood-{i}", rank=0, pid=1, start_time=1.0, seq=1)),
                       ("127.0.0.1", udp_port))
    text = metrics_when(daemon, lambda t: total(t, "trainmon_ingest_rejected_total") >= 4 + 1 + 200 - 15)

    assert 16 == total(text, "trainmon_ingest_ranks")
    assert 16 == len(samples(text, "trainmon_train_steps_total"))
    assert 3 == total(text, "trainmon_ingest_rejected_total", reason="malformed")
    assert 1 == total(text, "trainmon_ingest_rejected_total", reason="schema")
    assert 1 == total(text, "trainmon_ingest_rejected_total", reason="oversized")
    assert 200 - 15 == total(text, "trainmon_ingest_rejected_total", reason="max_ranks")
    assert {(("job_id", "ok"), ("rank", "0")): 7.0} == samples(text, "trainmon_train_steps_total", job_id="ok")
    assert 200 == daemon.get("/healthz").status_code


def report(**fields: object) -> dict[str, object]:
    """A valid report of this process as a plain JSON object, for tests that then break one field."""
    return {"v": 1, "type": "report", "job_id": "ok", "rank": 0, "pid": os.getpid(), "start_time": 1_767_000_000.0,
            "seq": 1, **fields}


def send_json(path: Path, *messages: dict[str, object]) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        for msg in messages:
            sock.sendto(json.dumps(msg).encode(), str(path))


def training_daemon(tmp_path: Path, daemons: list[Daemon], *args: str) -> Daemon:
    daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2", *args])
    daemons.append(daemon)
    return daemon


def both_formats_parse(daemon: Daemon) -> str:
    """The metrics text, after checking that both exposition formats answer 200 and parse."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
    from prometheus_client.parser import text_string_to_metric_families as parse_text

    text = daemon.get("/metrics", headers={"Accept": "text/plain"})
    openmetrics = daemon.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert (200, 200) == (text.status_code, openmetrics.status_code)
    list(parse_text(text.text))
    list(parse_openmetrics(openmetrics.text))
    return text.text


HUGE = 10**400


def test_an_overflowing_integer_in_any_float_field_is_rejected_and_ingest_goes_on(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """Each used to raise OverflowError outside the rejection path and kill the receiver for good."""
    daemon = training_daemon(tmp_path, daemons)
    path = tmp_path / "ingest.sock"
    send_json(path, report(rank=1, loss=HUGE), report(rank=2, comm_wait=HUGE), report(rank=3, start_time=HUGE),
              report(rank=4, collectives=[["all_reduce", "g", HUGE, 1, 1]]), report(steps=9))
    text = metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 9)

    assert 4 == total(text, "trainmon_ingest_rejected_total")
    assert 1 == total(text, "trainmon_collector_success", collector="training")


def test_unprintable_label_text_is_rejected_and_metrics_keep_answering(tmp_path: Path, daemons: list[Daemon]) -> None:
    """A lone surrogate in an env name made every scrape a 500; control characters reached label values."""
    daemon = training_daemon(tmp_path, daemons)
    path = tmp_path / "ingest.sock"
    hostile = ["NCCL_\ud800", "NCCL_\x00", "NCCL_A\r", "NCCL_\x1b[31m", "NCCL_\u2028"]
    # One rank each: reports of one process in one burst are coalesced to the newest.
    send_json(path, *(report(rank=i + 1, nccl_env={name: "1"}) for i, name in enumerate(hostile)),
              report(rank=9, nccl_env={"NCCL_ALGO": "Ring\x00"}), report(steps=3))
    metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 3)
    text = both_formats_parse(daemon)

    assert 6 == total(text, "trainmon_ingest_rejected_total", reason="range")
    assert {} == samples(text, "trainmon_train_nccl_env_info")


def test_two_entries_with_the_same_labels_are_rejected(tmp_path: Path, daemons: list[Daemon]) -> None:
    daemon = training_daemon(tmp_path, daemons)
    entry = ["all_reduce", "default_pg", 1.0, 1, 8]
    send_json(tmp_path / "ingest.sock", report(rank=1, collectives=[entry, entry]), report(steps=1))
    text = metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 1)

    assert 1 == total(text, "trainmon_ingest_rejected_total", reason="schema")
    assert {} == samples(text, "trainmon_nccl_calls_total")


def test_a_deleted_socket_file_or_directory_is_made_again(tmp_path: Path, daemons: list[Daemon]) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o750)
    path = run / "ingest.sock"
    daemon = training_daemon(tmp_path, daemons, "--ingest-socket", str(path), "--ingest-socket-mode", "0620")
    send_json(path, report(steps=1))
    metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 1)

    path.unlink()
    wait_until(path.exists)
    send_json(path, report(seq=2, steps=2))
    metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 2)
    path.unlink()
    run.rmdir()
    wait_until(path.exists)
    send_json(path, report(seq=3, steps=3))
    text = metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 3)

    assert 2 == total(text, "trainmon_ingest_socket_rebinds_total")
    assert (0o620, 0o750) == (path.stat().st_mode & 0o777, run.stat().st_mode & 0o777)
    assert 2 == daemon.log().count("ingest socket vanished")  # once per rebind, not once per cycle


SEND_AS_ITSELF = ("import json, os, socket, sys\n"
                  "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                  "s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)\n"
                  "for m in json.loads(sys.stdin.read()):\n"
                  "    m['pid'] = os.getpid()\n"
                  "    s.sendto(json.dumps(m).encode(), sys.argv[1])\n")


def send_from_another_process(path: Path, messages: list[dict[str, object]]) -> None:
    """Send `messages` from another process of this user, each carrying that process's own pid."""
    subprocess.run([sys.executable, "-c", SEND_AS_ITSELF, str(path)], input=json.dumps(messages), text=True,
                   check=True, timeout=60)


def daemon_with_a_rank(tmp_path: Path, daemons: list[Daemon]) -> tuple[Daemon, Path]:
    """A daemon serving rank 0 of job "ok" (this process, 5 steps), and its ingest socket."""
    daemon = training_daemon(tmp_path, daemons)
    path = tmp_path / "ingest.sock"
    send_json(path, report(steps=5))
    metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 5)
    return daemon, path


def test_a_forged_pid_a_takeover_and_a_foreign_goodbye_are_identity_rejections(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """Another member of the socket group cannot speak for this process or take its live slot."""
    daemon, path = daemon_with_a_rank(tmp_path, daemons)
    send_json(path, report(seq=2, steps=6, pid=os.getpid() + 1))
    send_from_another_process(path, [report(steps=1, start_time=1_767_000_100.0), report(seq=2, type="bye")])
    metrics_when(daemon, lambda t: total(t, "trainmon_ingest_rejected_total") == 3)
    send_json(path, report(seq=3, steps=7))
    text = metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 7)

    assert 3 == total(text, "trainmon_ingest_rejected_total", reason="identity")
    assert {} == samples(text, "trainmon_train_rank_exits_total")
    assert {str(os.getpid())} == {dict(k)["pid"] for k in samples(text, "trainmon_train_rank_info")}


def test_goodbyes_for_made_up_jobs_from_another_process_leave_a_real_jobs_exits(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """Issue 31: 128 goodbyes for made-up jobs erased every real job's trainmon_train_rank_exits_total."""
    daemon, path = daemon_with_a_rank(tmp_path, daemons)
    send_json(path, report(seq=2, type="bye", steps=5))  # a goodbye carries the rank's last totals
    metrics_when(daemon, lambda t: total(t, "trainmon_train_rank_exits_total", job_id="ok") == 1)
    send_from_another_process(path, [report(job_id=f"made-up-{i}", type="bye") for i in range(300)])
    text = metrics_when(daemon, lambda t: total(t, "trainmon_ingest_evicted_total", reason="exit_job_ids") >= 44)

    assert {(("job_id", "ok"), ("reason", "clean")): 1.0} == samples(text, "trainmon_train_rank_exits_total",
                                                                       job_id="ok")


SEND_STDIN = ("import socket, sys\n"
              "socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(sys.stdin.buffer.read(), sys.argv[1])\n")


def send_as(path: Path, uid: int, message: dict[str, object]) -> None:
    subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c", SEND_STDIN,
                    str(path)], input=json.dumps(message).encode(), check=True, timeout=60)


def test_without_host_pid_a_live_rank_is_taken_over_or_ended_only_by_its_own_uid(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """Issue 31: the DaemonSet has no hostPID, so the daemon's kernel gives every sender pid 0 (the senders are
    in other pid namespaces), and anyone who could reach the socket could overwrite a live rank. Here the
    daemon runs in a pid namespace of its own and the senders, as two users, outside it."""
    require(os.geteuid() == 0 and bool(shutil.which("unshare")) and bool(shutil.which("setpriv")),
            "needs root, unshare and setpriv to run the daemon in a pid namespace and send as other users")
    with tempfile.TemporaryDirectory(prefix="tm-") as directory:  # short, and open to the senders' uids
        os.chmod(directory, 0o755)
        path = Path(directory) / "ingest.sock"
        daemon = start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2", "--ingest-socket",
                                         str(path), "--ingest-socket-mode", "0666"],
                              wrapper=["unshare", "--pid", "--fork", "--kill-child"])
        daemons.append(daemon)
        send_as(path, 1111, report(pid=10, steps=5))
        metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 5)
        send_as(path, 2222, report(pid=10, steps=1, start_time=1_767_000_100.0))  # a "restart"
        send_as(path, 2222, report(pid=10, seq=2, steps=5, type="bye"))
        metrics_when(daemon, lambda t: total(t, "trainmon_ingest_rejected_total") == 2)
        send_as(path, 1111, report(pid=10, seq=2, steps=6))
        text = metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 6)

    assert 2 == total(text, "trainmon_ingest_rejected_total", reason="identity")
    assert {} == samples(text, "trainmon_train_rank_exits_total")


def test_a_seq_leap_and_a_counter_going_backwards_are_refused(tmp_path: Path, daemons: list[Daemon]) -> None:
    daemon = training_daemon(tmp_path, daemons)
    path = tmp_path / "ingest.sock"
    # One at a time: reports of one process in one burst are coalesced to the newest.
    for msg, rejected in ((report(steps=5), 0), (report(seq=2**62 - 1, steps=6), 1), (report(seq=3, steps=4), 2)):
        send_json(path, msg)

        def settled(text: str, n: int = rejected) -> bool:
            return total(text, "trainmon_ingest_rejected_total") == n and total(text, "trainmon_train_steps_total") == 5

        metrics_when(daemon, settled)
    send_json(path, report(seq=4, steps=8))
    text = metrics_when(daemon, lambda t: total(t, "trainmon_train_steps_total") == 8)

    assert 2 == total(text, "trainmon_ingest_rejected_total", reason="range")


def test_a_flood_of_wide_ranks_stays_within_the_series_budget(tmp_path: Path, daemons: list[Daemon]) -> None:
    """With default caps: ~24 worst-case ranks fit in 8,000 series, the rest are refused and counted."""
    daemon = training_daemon(tmp_path, daemons)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sock.setblocking(True)
        for rank in range(200):
            sock.sendto(wire.encode(widest_report("wide", rank)), str(tmp_path / "ingest.sock"))
    text = metrics_when(daemon, lambda t: total(t, "trainmon_ingest_rejected_total") + total(t, "trainmon_ingest_ranks")
                        >= 200)
    training = [line for line in text.splitlines()
                if line.startswith(("trainmon_train_", "trainmon_nccl_")) and not line.startswith("#")]

    assert 0 < total(text, "trainmon_ingest_rejected_total", reason="series_budget")
    assert 7_000 < len(training) <= 8_000
