"""Network and parallel file-system clients, read per mount: what each client counts, in one shape.

`lustre` reads the Lustre client's lprocfs files, `nfs` the kernel's mountstats, `gpfs` the answers
of a background `mmpmon`. Each turns its client's counters into `FsCounters` for one mount; the
`fs` collector serves them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, kw_only=True)
class FsCounters:
    """One mount's counters in base units; None where this client does not count it (served as absent).

    `operations` holds a fixed set of lower-case op names per file-system type, every one present
    (0 when the client has not counted it yet), so a mount's series do not come and go.
    """

    read_bytes: int | None = None
    written_bytes: int | None = None
    operations: Mapping[str, int] = field(default_factory=dict)
    rpcs: int | None = None
    rpc_seconds: float | None = None
    rpc_timeouts: int | None = None
    rpcs_in_flight: int | None = None


@dataclass(frozen=True, slots=True)
class ClientReading:
    """What one mount's client gave this cycle: its counters (None when nothing could be read) and notes."""

    counters: FsCounters | None
    skipped: tuple[str, ...] = ()
    found: str = ""
