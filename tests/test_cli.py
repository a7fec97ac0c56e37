from __future__ import annotations

import socket
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.helpers.daemon import start_daemon
from tests.helpers.trees import Disk, IbDevice, IbPort, pci_device, write, write_diskstats, write_infiniband

REPO = Path(__file__).resolve().parents[1]


def trainmon(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainmon", *args], capture_output=True, text=True, timeout=60,
                          env=env)


@pytest.mark.parametrize(("args", "message"), [
    (["serve", "--interval", "abc"], "--interval='abc': expected a number of seconds"),
    (["serve", "--interval", "-1"], "--interval='-1': must be a positive"),
    (["serve", "--listen", "nohost"], "--listen='nohost': expected HOST:PORT"),
    (["serve", "--listen", "1.2.3.4:99999"], "expected HOST:PORT with a port in 1-65535"),
    (["serve", "--collectors", "gpu,tpu"], "unknown collector tpu"),
    (["serve", "--nvme-devices", "nvme[0"], "not a regular expression"),
    (["serve", "--ingest-socket-mode", "999"], "expected an octal file mode"),
    (["serve", "--log-level", "loud"], "expected one of debug"),
    (["serve", "--max-ranks", "0"], "expected a positive integer"),
    (["serve", "--ingest-udp", "0.0.0.0:9843"], "add --ingest-udp-allow-remote"),
    (["serve", "--nccl-ras-addr", "10.0.0.7:28028"], "needs --nccl-ras-allow-remote"),
    (["serve", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_bad_values_get_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = trainmon(*args)

    assert 2 == result.returncode
    assert 1 == len(result.stderr.strip().splitlines()), result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_environment_variables_are_flags(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "TRAINMON_INTERVAL": "soon"}

    result = trainmon("serve", env=env)

    assert 2 == result.returncode
    assert "--interval='soon'" in result.stderr


def test_flag_wins_over_environment(tmp_path: Path) -> None:
    write_diskstats(tmp_path / "proc", [Disk("nvme0n1")])
    env = {"PATH": "/usr/bin:/bin", "TRAINMON_COLLECTORS": "gpu", "TRAINMON_PROCFS": str(tmp_path / "proc")}

    result = trainmon("check", "--collectors", "nvme", env=env)

    assert 0 == result.returncode, result.stdout + result.stderr
    assert result.stdout.startswith("nvme ")


def test_check_prints_what_each_collector_found(tmp_path: Path) -> None:
    write_diskstats(tmp_path / "proc", [Disk("nvme0n1"), Disk("nvme1n1", minor=1)])
    write_infiniband(tmp_path / "sys", [IbDevice("mlx5_0", ports=[IbPort("mlx5_0")])])
    write(pci_device(tmp_path / "sys", "0000:18:00.0", "0x10de") / "aer_dev_fatal", "CmpltTO 1\nTOTAL_ERR_FATAL 1\n")

    result = trainmon("check", "--collectors", "nvme,infiniband,aer", "--procfs", str(tmp_path / "proc"),
                      "--sysfs", str(tmp_path / "sys"))

    assert 0 == result.returncode
    assert "nvme0n1:" in result.stdout and "nvme1n1:" in result.stdout
    assert "mlx5_0/1: ACTIVE, InfiniBand, 50000000000 B/s" in result.stdout
    assert "0000:18:00.0 (NVIDIA): AER errors: fatal 1" in result.stdout


def test_check_exits_non_zero_when_a_collector_fails(tmp_path: Path) -> None:
    (tmp_path / "sys" / "class").mkdir(parents=True)
    (tmp_path / "sys" / "class" / "infiniband").write_text("a file where a directory belongs")

    result = trainmon("check", "--collectors", "infiniband", "--sysfs", str(tmp_path / "sys"))

    assert 1 == result.returncode
    assert "infiniband   FAILING" in result.stdout
    assert "NotADirectoryError" in result.stdout


def test_check_prints_each_result_once(tmp_path: Path) -> None:
    """Issue 41: each collector's state was printed twice, as a log line on stderr and in the table."""
    write_diskstats(tmp_path / "proc", [])
    (tmp_path / "sys" / "class").mkdir(parents=True)
    (tmp_path / "sys" / "class" / "infiniband").write_text("a file where a directory belongs")

    result = trainmon("check", "--collectors", "infiniband,nvme", "--sysfs", str(tmp_path / "sys"), "--procfs",
                      str(tmp_path / "proc"))

    both = result.stdout + result.stderr
    assert (1, 1, 1) == (result.returncode, both.count("NotADirectoryError"), both.count("no NVMe namespaces")), both


def test_version() -> None:
    result = trainmon("version")

    assert 0 == result.returncode
    assert result.stdout.startswith("trainmon 0.")


def test_without_the_daemon_extra_serve_names_it_in_one_line(tmp_path: Path) -> None:
    """A bare interpreter with only the package: the base install is the hook, standard library only."""
    venv.create(tmp_path / "bare", with_pip=False)
    python = tmp_path / "bare" / "bin" / "python"
    env = {"PYTHONPATH": str(REPO / "exporter"), "PATH": "/usr/bin:/bin"}

    serve = subprocess.run([python, "-m", "trainmon", "serve"], capture_output=True, text=True, env=env, timeout=60)
    version = subprocess.run([python, "-m", "trainmon", "version"], capture_output=True, text=True, env=env,
                             timeout=60)

    assert 1 == serve.returncode
    assert ["trainmon: the daemon needs its dependencies, the [daemon] extra: pip install '.[daemon]' in a "
            "trainmon checkout, not on the package index yet "
            "(missing: prometheus_client, fastapi, uvicorn, psutil, pynvml)"] == serve.stderr.strip().splitlines()
    assert 0 == version.returncode


def test_first_run_as_a_normal_user_socket_dir_does_not_stop_serving(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    """An ingest socket whose directory cannot be made costs the training collector only."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    write_diskstats(tmp_path / "proc", [Disk("nvme0n1")])
    daemons.append(daemon := start_daemon(tmp_path, [
        "--collectors", "nvme,training", "--procfs", str(tmp_path / "proc"),
        "--ingest-socket", str(blocker / "sub" / "ingest.sock")]))

    status = {c["name"]: c for c in daemon.get("/api/v1/status").json()["collectors"]}

    assert status["nvme"]["ok"]
    assert not status["training"]["ok"]
    assert str(blocker) in status["training"]["error"]


def test_dash_dash_version() -> None:
    result = trainmon("--version")

    assert 0 == result.returncode
    assert result.stdout.startswith("trainmon 0.")


@pytest.mark.parametrize(("args", "flag"), [
    (["check", "--listen", "127.0.0.1:1"], "--listen"),
    (["check", "--web-config", "web.yml"], "--web-config"),
    (["demo", "--procfs", "/proc"], "--procfs"),
    (["demo", "--ingest-socket", "/tmp/x.sock"], "--ingest-socket"),
    (["serve", "--incident", "stall"], "--incident"),
])
def test_check_and_demo_take_only_the_flags_they_use(args: list[str], flag: str) -> None:
    result = trainmon(*args)

    assert 2 == result.returncode
    assert f"unrecognized arguments: {flag}" in result.stderr


def test_demo_help_shows_its_own_defaults() -> None:
    result = trainmon("demo", "--help")

    assert 0 == result.returncode
    interval = result.stdout.split("  --interval INTERVAL", 1)[1].split("  --", 1)[0]
    assert "default '1'" in " ".join(interval.split())
    assert "--incident" in result.stdout and "nvme-slow" in result.stdout and "--procfs" not in result.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["demo", "--incident", "fire"], "--incident='fire': unknown incident; known: straggler, comm-bound"),
    (["serve", "--ingest-socket-group", "no-such-group-here"], "--ingest-socket-group='no-such-group-here': no such"),
])
def test_bad_demo_and_group_values_get_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = trainmon(*args, *(["--ingest-socket", str(tmp_path / "s.sock")] if args[0] == "serve" else []))

    assert 2 == result.returncode, result.stderr
    assert [f"trainmon: error: {message}"] == [line[:len(message) + 17] for line in result.stderr.splitlines()]
    assert not (tmp_path / "s.sock").exists()  # stopped before the training collector bound it


def test_an_address_that_cannot_be_bound_stops_start_up_before_any_collector(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = trainmon("serve", "--listen", f"127.0.0.1:{port}", "--ingest-socket", str(tmp_path / "s.sock"))

    assert 2 == result.returncode
    assert [f"trainmon: error: --listen='127.0.0.1:{port}': cannot bind it (Address already in use)"] == \
        result.stderr.strip().splitlines()
    assert not (tmp_path / "s.sock").exists()


def test_check_beside_a_running_daemon_probes_its_socket_and_leaves_it_alone(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    write_diskstats(tmp_path / "proc", [Disk("nvme0n1")])
    path = tmp_path / "ingest.sock"
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "nvme,training", "--procfs",
                                                     str(tmp_path / "proc"), "--ingest-socket", str(path)]))
    bound = path.stat().st_ino

    result = trainmon("check", "--collectors", "nvme,training", "--procfs", str(tmp_path / "proc"),
                      "--ingest-socket", str(path))
    missing = trainmon("check", "--collectors", "training", "--ingest-socket", str(tmp_path / "none.sock"))

    assert 0 == result.returncode, result.stdout + result.stderr
    assert f"ingest socket {path} is answered by a running daemon" in result.stdout
    assert bound == path.stat().st_ino
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as hook:
        hook.connect(str(path))  # the daemon still owns it
    assert 200 == daemon.get("/healthz").status_code
    assert 0 == missing.returncode
    assert "no daemon answers ingest socket" in missing.stdout and "start trainmon serve" in missing.stdout
