"""The README's hook snippet, run as written against a real socket: it counts samples of an `(x, y)`
batch, passes the loss, and a lone process reports itself as rank 0 of 1 on local rank 0."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest
import torch

from trainmon import wire
from trainmon.hook.identity import launch_layout

README = Path(__file__).resolve().parents[1] / "README.md"
BATCH, BATCHES = 4, 3


def snippet() -> str:
    return next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "TrainingMonitor" in b)


@pytest.fixture
def reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[wire.Report]:
    """Run the snippet with a tiny model and a loader of `(x, y)` batches; yield what reached the socket."""
    path = tmp_path / "ingest.sock"
    daemon = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    daemon.bind(str(path))
    daemon.settimeout(5)
    monkeypatch.setenv("TRAINMON_INGEST_SOCKET", str(path))
    model = torch.nn.Linear(3, 1)
    data = torch.utils.data.TensorDataset(torch.randn(BATCH * BATCHES, 3), torch.randn(BATCH * BATCHES, 1))
    namespace: dict[str, Any] = {"ddp_model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1), "scaler": None,
                 "loader": torch.utils.data.DataLoader(data, batch_size=BATCH),
                 "loss_fn": torch.nn.functional.mse_loss, "save": lambda *args: None}
    exec(snippet(), namespace)
    namespace["mon"].close()
    received: list[wire.Report] = []
    while not received or received[-1].kind != "bye":
        received.append(wire.decode(daemon.recv(wire.MAX_DATAGRAM)))
    daemon.close()
    return received


def test_readme_snippet_counts_samples_and_passes_the_loss_and_grad_norm(reports: list[wire.Report]) -> None:
    last = reports[-1]

    assert (BATCHES, BATCH * BATCHES) == (last.steps, last.samples)
    assert last.loss is not None and last.loss > 0
    assert last.grad_norm is not None and last.grad_norm > 0  # `step.grad_norm`, as the quick start shows


def test_a_lone_process_is_rank_0_of_1_on_local_rank_0(reports: list[wire.Report]) -> None:
    assert {(0, 1, 0)} == {(r.rank, r.world_size, r.local_rank) for r in reports}
    assert (0, 1, 0) == launch_layout({})
    assert (3, 8, None) == launch_layout({"RANK": "3", "WORLD_SIZE": "8"})


def test_readme_names_the_socket_variable() -> None:
    hook_section = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]

    assert "TRAINMON_INGEST_SOCKET" in hook_section
