"""A loopback stand-in for NCCL RAS's client port replaying a fixture answer: the demo's `RasPort` (real TCP on
127.0.0.1, NCCL's protocol; see tests/fixtures/nccl/NOTICE.md), misbehaving on request."""

from __future__ import annotations

from trainmon.simulation.nccl import RasPort


class RasStandIn(RasPort):
    def __init__(self, answer: bytes, chunk: int = 1 << 20, delay: float = 0.0,
                 close_after_handshake: bool = False) -> None:
        super().__init__(lambda: answer, chunk, delay, close_after_handshake)

    def close(self) -> None:
        self.stop()
