"""The demo node's network file systems: a Lustre client (4 OSCs, the ≤ 2.10 procfs layout) holding the
dataset and the checkpoints, and an NFS home directory, advanced with the simulated job's traffic.

Written in the formats the real clients print (llite and OSC `stats`, OSC `import`, `self/mountinfo`,
`self/mountstats`), so the real `fs` collector reads them. `--incident storage-slow` makes the Lustre
servers slow: RPCs take 20 times longer and some time out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainmon.simulation.incidents import SLOW_MOUNT, Plan

LUSTRE_MOUNT, LUSTRE_FSNAME, SUPERBLOCK = "/lustre", "lustre", "ffff9a8b40c1e000"
NFS_MOUNT, NFS_SOURCE = "/home", "10.10.0.5:/export/home"
OSCS = 4
RPC_BYTES = 4 << 20  # Lustre's default max_pages_per_rpc of 1024 4 KiB pages
RPC_SECONDS, SLOW_RPC_SECONDS = 0.003, 0.060
IN_FLIGHT, SLOW_IN_FLIGHT = 8, 32  # per OSC
OPENS_PER_TICK = 8  # the data loader opens shards
NFS_OPS_PER_TICK = {"GETATTR": 20, "LOOKUP": 5, "ACCESS": 5, "READ": 2, "OPEN": 1, "CLOSE": 1}
NFS_OP_MS = 0.4
NFS_READ_BYTES = 64 << 10
MOUNTINFO = (
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
    f"310 22 0:61 / {LUSTRE_MOUNT} rw,relatime shared:210 - lustre 10.10.0.1@o2ib:10.10.0.2@o2ib:/{LUSTRE_FSNAME} "
    "rw,flock,lazystatfs,noencrypt\n"
    f"320 22 0:62 / {NFS_MOUNT} rw,relatime shared:220 - nfs4 {NFS_SOURCE} rw,vers=4.2,rsize=1048576,"
    "wsize=1048576,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.10.0.20,local_lock=none,addr=10.10.0.5\n"
)


@dataclass(slots=True)
class _Osc:
    name: str
    rpcs: float = 0.0
    wait_us: float = 0.0
    timeouts: int = 0
    inflight: int = 0


@dataclass(slots=True)
class _Counters:
    llite: dict[str, float] = field(default_factory=dict)  # name -> count; read/write bytes in `bytes_*`
    read_bytes: float = 0.0
    written_bytes: float = 0.0
    nfs_ops: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NFS_OPS_PER_TICK, 0))


class DemoFileSystems:
    """The mounts' counters, advanced by `advance` and written by `write` through `put(path, text)` (the tree's
    atomic writer) under `proc`."""

    def __init__(self, proc: Path, plan: Plan, put: Callable[[Path, str], None]) -> None:
        self._proc, self._plan, self._put = proc, plan, put
        self._oscs = [_Osc(f"{LUSTRE_FSNAME}-OST{i:04x}-osc-{SUPERBLOCK}") for i in range(OSCS)]
        self._counters = _Counters()
        self._ticks = 0
        put(proc / "self" / "mountinfo", MOUNTINFO)

    def advance(self, read_bytes: int, written_bytes: int) -> None:
        slow = self._plan.active("storage-slow") and SLOW_MOUNT == LUSTRE_MOUNT
        c = self._counters
        self._ticks += 1
        c.read_bytes += read_bytes
        c.written_bytes += written_bytes
        opens = OPENS_PER_TICK if read_bytes else 0
        for name, count in (("read_bytes", read_bytes / (1 << 20)), ("write_bytes", written_bytes / (1 << 20)),
                            ("open", opens), ("close", opens), ("getattr", 3 * opens + 1), ("statfs", 1)):
            c.llite[name] = c.llite.get(name, 0.0) + count
        rpcs = (read_bytes + written_bytes) / RPC_BYTES / OSCS + 1  # a ping per OSC and tick
        for osc in self._oscs:
            osc.rpcs += rpcs
            osc.wait_us += rpcs * (SLOW_RPC_SECONDS if slow else RPC_SECONDS) * 1e6
            osc.timeouts += 1 if slow and self._ticks % 2 == 0 else 0
            osc.inflight = SLOW_IN_FLIGHT if slow else (IN_FLIGHT if read_bytes or written_bytes else 0)
        for op, count in NFS_OPS_PER_TICK.items():
            c.nfs_ops[op] += count

    def write(self) -> None:
        c = self._counters
        llite = self._proc / "fs" / "lustre" / "llite" / f"{LUSTRE_FSNAME}-{SUPERBLOCK}" / "stats"
        lines = [_stats_line("read_bytes", c.llite.get("read_bytes", 0), "bytes", c.read_bytes),
                 _stats_line("write_bytes", c.llite.get("write_bytes", 0), "bytes", c.written_bytes)]
        lines += [_stats_line(name, c.llite.get(name, 0), "regs") for name in ("open", "close", "getattr", "statfs")]
        self._put(llite, _stats(lines))
        for osc in self._oscs:
            base = self._proc / "fs" / "lustre" / "osc" / osc.name
            self._put(base / "stats", _stats([_stats_line("req_waittime", osc.rpcs, "usec", osc.wait_us)]))
            self._put(base / "import", _import(osc))
        self._put(self._proc / "self" / "mountstats", _mountstats(c))


def _stats_line(name: str, count: float, unit: str, total: float | None = None) -> str:
    if not int(count):
        return ""  # Lustre prints no line for a counter that has not counted yet
    tail = "" if total is None else f" 1 {int(total)} {int(total)}"
    return f"{name:<25} {int(count)} samples [{unit}]{tail}"


def _stats(lines: list[str]) -> str:
    return "\n".join(["snapshot_time             1700000000.000000000 secs.nsecs", *filter(None, lines)]) + "\n"


def _import(osc: _Osc) -> str:
    target = osc.name.split("-osc-")[0]
    return (f"import:\n    name: {osc.name}\n    target: {target}_UUID\n    state: FULL\n"
            f"    rpcs:\n       inflight: {osc.inflight}\n       unregistering: 0\n       timeouts: {osc.timeouts}\n"
            f"       avg_waittime: {int(osc.wait_us / osc.rpcs) if osc.rpcs else 0} usec\n")


def _mountstats(c: _Counters) -> str:
    ops = "\n".join(f"\t{op:>12}: {n} {n} 0 {n * 200} {n * (NFS_READ_BYTES if op == 'READ' else 120)} "
                    f"{n // 10} {int(n * NFS_OP_MS)} {int(n * NFS_OP_MS * 1.2)}" for op, n in c.nfs_ops.items())
    reads = c.nfs_ops["READ"] * NFS_READ_BYTES
    return (f"device {NFS_SOURCE} mounted on {NFS_MOUNT} with fstype nfs4 statvers=1.1\n"
            "\topts:\trw,vers=4.2,rsize=1048576,wsize=1048576,hard,proto=tcp,timeo=600,retrans=2,sec=sys\n"
            f"\tage:\t{len(c.nfs_ops)}\n"
            f"\tbytes:\t{reads} 0 0 0 {reads} 0 {reads // 4096} 0\n"
            "\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)\n"
            "\tper-op statistics\n" + ops + "\n")
