"""The daemon owns the ingest server's lifecycle: it binds it before each cycle and closes it after."""

from __future__ import annotations

from pathlib import Path

from trainmon.daemon import build_resources, close_resources, collect_once, make_scheduler
from trainmon.settings import Settings
from trainmon.snapshot import SnapshotStore


def test_trainmon_check_binds_the_ingest_socket_for_its_cycle_and_removes_it_after(tmp_path: Path) -> None:
    path = tmp_path / "ingest.sock"

    snapshot = collect_once(Settings(collectors=("training",), ingest_socket=str(path)))

    [status] = snapshot.statuses
    assert ("training", "ok", (f"ingest listening on unix:{path}",)) == (status.name, status.state, status.found)
    assert not path.exists()


def test_a_socket_removed_between_cycles_is_bound_again_by_the_next_cycle(tmp_path: Path) -> None:
    path = tmp_path / "ingest.sock"
    settings = Settings(collectors=("training",), ingest_socket=str(path))
    resources = build_resources(settings)
    scheduler = make_scheduler(settings, resources, SnapshotStore())
    try:
        scheduler.run_cycle()
        path.unlink()

        [status] = scheduler.run_cycle().statuses

        assert path.is_socket()
        assert ("ok", 1) == (status.state, resources.ingest.rebinds if resources.ingest else None)
    finally:
        scheduler.stop()
        close_resources(resources)
