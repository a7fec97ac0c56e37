"""The `gpu` collector: every GPU metric of SPEC §4 from NVML, one cycle in flight at a time.

NVML is initialised once and kept. Without a library or a driver `collect()` raises (success 0,
one line saying why) and initialisation is retried with back-off while the daemon serves. A GPU
whose calls fail reads `trainmon_gpu_up 0` and loses its value series; the others go on. After
GPU_IS_LOST or RESET_REQUIRED NVML is shut down and initialised again (with back-off doubling from
the interval to 5 minutes) so that a reset can succeed, and the XID event set is armed again. That
happens after the cycle's reads, and each GPU takes a fresh GPM sample on re-attaching, so the
healthy GPUs keep their SM series through every retry; the GPUs that were down are read again at once.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from trainmon.catalog import gpu as catalog
from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import CollectorError, NoData
from trainmon.families import Metric, counter, gauge, info, value_family
from trainmon.gpu_inventory import InventoryGpu
from trainmon.health.history import HealthHistory, Memory
from trainmon.health.kmsg_reader import KmsgReader, KmsgStatus
from trainmon.health.state_file import BOOT_ID, StateFile, StateStatus, read_boot_id
from trainmon.health.verdict import Signals, Verdict, XidSeen, decide
from trainmon.nvml.backoff import Backoff
from trainmon.nvml.device import Gpu, GpuIdentity, GpuReading, identify
from trainmon.nvml.errors import (
    NVML_FAILURES,
    is_lost,
    is_no_driver,
    is_reset_required,
    needs_reinit,
    nvml_error_line,
)
from trainmon.nvml.metrics import GpuMetric
from trainmon.nvml.peaks import peak_flops
from trainmon.nvml.session import NvmlSession
from trainmon.nvml.xid import Watched, XidCounts, XidWatcher
from trainmon.parsers.kmsg import nvml_bus
from trainmon.roots import Unavailable, list_directory, read_attribute
from trainmon.settings import Settings
from trainmon.sysfs.aer import NVIDIA_VENDOR

log = logging.getLogger(__name__)

DISPLAY_CLASS = "0x03"  # PCI base class 03: VGA, XGA and 3D controllers
GPU_LABELS = ("gpu", "uuid")
NOT_FOUND = "not found by NVML since re-initialisation"
DEVICE_NODE = re.compile(r"nvidia(ctl|\d+)")  # what the driver (or nvidia-modprobe) creates for each GPU
MAX_LISTED_BUSES = 20  # other buses named in /api/v1/status; other_bus_count has them all


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuStatus:
    """One GPU in one cycle: read (`reading`) or failed (`error`)."""

    identity: GpuIdentity
    reading: GpuReading | None
    error: str | None = None
    lost: bool = False  # GPU_IS_LOST, or not enumerated by NVML since re-initialisation
    reset_required: bool = False


def count_pci_gpus(sysfs: Path) -> int | None:
    """NVIDIA display/3D controllers on the PCI bus, whatever NVML says; None without a PCI tree."""
    devices = sysfs / "bus" / "pci" / "devices"
    entries = list_directory(devices)
    if isinstance(entries, Unavailable):
        return None
    return sum(1 for entry in entries if _lowered(devices / entry / "vendor") == NVIDIA_VENDOR
               and _lowered(devices / entry / "class").startswith(DISPLAY_CLASS))


def nvidia_device_nodes(devfs: Path) -> list[str] | None:
    """The NVIDIA device nodes under `devfs` (nvidiactl, nvidia0, ...); None where it cannot be listed."""
    entries = list_directory(devfs)
    if isinstance(entries, Unavailable):
        return None
    return [entry for entry in entries if DEVICE_NODE.fullmatch(entry)]


def _lowered(path: Path) -> str:
    """An attribute in lower case; "" where it is unavailable."""
    value = read_attribute(path)
    return value.lower() if isinstance(value, str) else ""


class GpuCollector:
    name = "gpu"

    def __init__(self, settings: Settings, resources: NodeResources, library: object | None = None,
                 expected: Callable[[], int | None] | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        """`library` replaces libnvidia-ml.so.1 (None: the system's); `expected` counts GPUs on the bus;
        `wall` is Unix time, which XIDs are stamped with."""
        self._simulated = resources.nvml is not None  # every surface says so
        if resources.nvml is not None and library is None:
            library, expected = resources.nvml.library(), resources.nvml.pci_gpus
        self._settings = settings
        self._inventory = resources.gpus
        self._clock = clock
        self._wall = wall
        self._state, self._health = _health_history(settings, simulated=self._simulated)
        self._expected = expected or (lambda: count_pci_gpus(settings.sysfs))
        self._session = NvmlSession(library)
        self._backoff = Backoff(initial=settings.interval)  # nvmlInit failing: no library, no driver
        self._reset_backoff = Backoff(initial=settings.interval)  # re-initialising for lost or missing GPUs
        self._cycle = threading.Lock()
        self._gpus: dict[str, Gpu] = {}  # by UUID, kept across re-initialisations
        self._attached: list[Gpu] = []
        self._unidentified: list[str] = []
        self._xid_problems: list[str] = []
        self._watcher: XidWatcher | None = None
        # The demo's simulated node has no kernel log of its own: its XIDs come from simulated NVML events.
        self._xids = XidCounts(kernel_log=not self._simulated)
        self._kmsg = None if self._simulated else KmsgReader(settings.kmsg, self._xids)
        self._kmsg_started = False
        self._last_error = ""
        self._no_driver = False  # the last nvmlInit found no library, or no driver loaded
        self._reinit_wanted = False

    # --- NVML lifecycle ---------------------------------------------------------------------------------

    def _open(self, now: float) -> None:
        if not self._backoff.ready(now):
            raise CollectorError(f"NVML unavailable ({self._last_error}); "
                                 f"next try in {self._backoff.retry_in(now):.0f}s")
        try:
            self._session.open()
            self._attach_all(now)
        except NVML_FAILURES as exc:
            self._close()
            self._last_error = nvml_error_line(exc)
            self._no_driver = is_no_driver(exc)
            self._backoff.failed(now)
            raise CollectorError(f"NVML unavailable ({self._last_error})") from exc
        self._backoff.succeeded()
        log.info("nvml initialised driver=%s gpus=%d", self._session.driver_version, len(self._attached))

    def _attach_all(self, now: float) -> None:
        self._attached, self._unidentified = [], []
        for index in range(self._session.device_count()):
            try:
                handle, identity = identify(index)
            except NVML_FAILURES as exc:
                self._unidentified.append(f"gpu {index}: {nvml_error_line(exc)}")
                continue
            gpu = self._gpus.setdefault(identity.uuid, Gpu(identity, retry_s=self._settings.interval))
            try:
                gpu.attach(handle, identity, now)
            except NVML_FAILURES as exc:
                self._unidentified.append(f"gpu {index} {identity.uuid}: {nvml_error_line(exc)}")
                continue
            self._attached.append(gpu)
        self._xids.claim(nvml_bus(g.identity.pci_bus_id) for g in self._gpus.values())
        try:
            self._watcher = XidWatcher([Watched(g.handle, nvml_bus(g.identity.pci_bus_id))
                                        for g in self._attached], self._xids)
            self._xid_problems = list(self._watcher.unsupported)
        except NVML_FAILURES as exc:
            self._xid_problems = [f"XID events: {nvml_error_line(exc)}"]

    def _close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        for gpu in self._attached:
            gpu.detach()
        self._attached = []
        self._session.close()

    def close(self) -> None:
        with self._cycle:
            self._close()
            if self._kmsg is not None:
                self._kmsg.stop()

    # --- one cycle -----------------------------------------------------------------------------------------

    def collect(self) -> Collection:
        # A hung ctypes call cannot be cancelled: never start a second cycle on top of it.
        if not self._cycle.acquire(blocking=False):
            raise CollectorError("the previous NVML cycle is still running (a driver call hangs)")
        try:
            return self._collect(self._clock())
        finally:
            self._cycle.release()

    def _collect(self, now: float) -> Collection:
        try:
            if not self._session.is_open:
                self._open(now)
        except CollectorError as exc:
            if self._without_gpus():
                raise NoData(f"no NVIDIA GPU: {self._last_error}, no NVIDIA device nodes in "
                             f"{self._settings.devfs} and none on the PCI bus") from exc
            raise CollectorError(str(exc), families=self._outage_families(str(exc))) from exc
        finally:
            self._start_kmsg()
        statuses = self._read_all(now)
        if self._reinit_due(now):
            self._reinitialise(now)
            statuses = [self._read_again(status, now) for status in statuses]  # a GPU back reads up at once
        if not self._unidentified and all(s.reading is not None for s in statuses):
            self._reset_backoff.succeeded()
        return self._collection(statuses)

    def _without_gpus(self) -> bool:
        """A node without GPUs: no NVML library or driver, no device nodes, none on the bus, none seen before.

        Absent hardware is not a failure (as for a node without InfiniBand); a GPU node whose NVML fails is.
        """
        return (self._no_driver and not self._gpus and not self._expected()
                and nvidia_device_nodes(self._settings.devfs) == [])

    def _start_kmsg(self) -> None:
        """Read the ring buffer's history before the first collection, once NVML has named this node's buses."""
        if self._kmsg is not None and not self._kmsg_started:
            self._kmsg_started = True
            self._kmsg.start()

    def _read_all(self, now: float) -> list[GpuStatus]:
        attached = {gpu.identity.uuid for gpu in self._attached}
        statuses = [self._read(gpu, now) for gpu in self._attached]
        statuses += [GpuStatus(identity=gpu.identity, reading=None, error=NOT_FOUND, lost=True)
                     for uuid, gpu in self._gpus.items() if uuid not in attached]
        return sorted(statuses, key=lambda s: s.identity.index)

    def _reinit_due(self, now: float) -> bool:
        if len(self._attached) < len(self._gpus) or self._unidentified:
            self._reinit_wanted = True  # only a fresh nvmlInit enumerates a GPU again
        return self._reinit_wanted and self._reset_backoff.ready(now)

    def _reinitialise(self, now: float) -> None:
        """Shut NVML down and start it again, after this cycle's reads of the healthy GPUs.

        After them, so their GPM windows of this cycle are served; `attach` takes a fresh GPM sample
        for each, so the next cycle has a full window too and their SM series never gap.
        """
        self._reinit_wanted = False
        self._reset_backoff.failed(now)  # until a healthy cycle, each further reset waits longer, up to minutes
        log.info("nvml re-initialising for a lost or missing GPU (the next one not before %.0fs)",
                 self._reset_backoff.retry_in(now))
        self._close()
        with contextlib.suppress(CollectorError):
            self._open(now)  # if NVML will not come back, the next cycle says why

    def _read_again(self, status: GpuStatus, now: float) -> GpuStatus:
        """A GPU that was down, read through the fresh session; the others keep this cycle's reading."""
        if status.reading is not None or not self._session.is_open:
            return status
        gpu = self._gpus[status.identity.uuid]
        if gpu not in self._attached:
            return GpuStatus(identity=gpu.identity, reading=None, error=NOT_FOUND, lost=True)
        return self._read(gpu, now)

    def _outage_families(self, error: str) -> tuple[Metric, ...]:
        """With NVML gone, the GPUs seen before still read `up 0` and the PCI bus still counts them."""
        statuses = [GpuStatus(identity=gpu.identity, reading=None, error=error) for gpu in self._gpus.values()]
        return self._collection(sorted(statuses, key=lambda s: s.identity.index)).families

    def _read(self, gpu: Gpu, now: float) -> GpuStatus:
        try:
            reading = gpu.read(now)
        except NVML_FAILURES as exc:
            if needs_reinit(exc):
                self._reinit_wanted = True
            return GpuStatus(identity=gpu.identity, reading=None, error=nvml_error_line(exc),
                             lost=is_lost(exc), reset_required=is_reset_required(exc))
        return GpuStatus(identity=gpu.identity, reading=reading)

    # --- families --------------------------------------------------------------------------------------------

    def _collection(self, statuses: Sequence[GpuStatus]) -> Collection:
        self._inventory.publish(_inventory(statuses))
        families: list[Metric] = [self._info(statuses)]
        up = gauge(catalog.GPU_UP)
        for status in statuses:
            up.add_metric(_ids(status.identity), 1.0 if status.reading is not None else 0.0)
        families.append(up)
        families.append(_peak_flops_family(s.identity for s in statuses))
        expected = self._expected()
        if expected is not None:
            family = gauge(catalog.GPUS_EXPECTED)
            family.add_metric([], float(expected))
            families.append(family)
        read = [(s.identity, s.reading) for s in statuses if s.reading is not None]
        families += _value_families(read)
        families += _process_families(read, per_process=self._settings.gpu_processes)
        families += _interconnect_families(read)
        families += _xid_families(self._xids, self._gpus.values())
        families += _health_families(self._verdicts(statuses))
        state = self._state.status()
        kmsg = self._kmsg.status() if self._kmsg is not None else None
        skipped = _skipped_by_line(read)
        skipped += self._unidentified + self._xid_problems
        if kmsg is not None and kmsg.error:
            skipped.append(f"kernel log: {kmsg.error}")
        if state.problem and state.path:  # a directory was asked for: why it is not (fully) used
            skipped.append(f"health state: {state.problem}")
        return Collection(
            families=tuple(families),
            found=(*self._found(statuses), _xid_source(kmsg), _state_line(state)),
            skipped=tuple(skipped),
            details={"simulated": self._simulated, "driver_version": self._session.driver_version,
                     "gpus": [{"index": s.identity.index, "uuid": s.identity.uuid, "name": s.identity.name,
                               "up": s.reading is not None, "error": s.error} for s in statuses],
                     "kmsg": _kmsg_details(kmsg, self._xids, self._gpus.values()),
                     "health_state": {"path": state.path, "persistent": state.persistent, "problem": state.problem}},
        )

    def _verdicts(self, statuses: Sequence[GpuStatus]) -> list[tuple[GpuIdentity, Verdict]]:
        xids: dict[str, list[XidSeen]] = {}
        for entry in self._xids.snapshot():
            if entry.last_actionable is not None:  # the others were all of a kind the catalog ignores
                xids.setdefault(entry.key.bus, []).append(XidSeen(entry.key.xid, entry.last_actionable))
        now = self._wall()
        verdicts = []
        for status in statuses:
            seen = tuple(xids.get(nvml_bus(status.identity.pci_bus_id), ()))
            memory = self._health.observe(status.identity.uuid, status.reading is not None, seen, now)
            verdicts.append((status.identity, decide(_signals(status, seen, memory), now)))
        if self._health.changed:
            self._state.save(self._health.saved(now))
        self._state.flush()  # a write that failed (a full disk) is tried again
        return verdicts

    def _info(self, statuses: Sequence[GpuStatus]) -> Metric:
        family = info(catalog.GPU_INFO)
        for status in statuses:
            i = status.identity
            family.add_metric(_ids(i), {"name": i.name, "pci_bus_id": i.pci_bus_id,
                                        "driver_version": self._session.driver_version,
                                        "minor_number": i.minor_number})
        return family

    def _found(self, statuses: Sequence[GpuStatus]) -> Iterable[str]:
        source = "simulated node" if self._simulated else "NVML"
        yield f"{source}, driver {self._session.driver_version or 'unknown'}, {len(statuses)} GPU(s)"
        for status in statuses:
            i = status.identity
            state = "up" if status.reading is not None else f"DOWN ({status.error})"
            yield f"gpu {i.index}: {i.name} {i.uuid} {i.pci_bus_id}: {state}"


def _inventory(statuses: Sequence[GpuStatus]) -> Iterable[InventoryGpu]:
    """What the GPU-ownership collectors join on (trainmon.gpu_inventory)."""
    for s in statuses:
        processes = s.reading.processes if s.reading is not None else None
        pids = tuple(p.pid for p in processes) if processes is not None else None
        yield InventoryGpu(index=s.identity.index, uuid=s.identity.uuid, pids=pids,
                           minor_number=s.identity.minor_number, pci_bus_id=s.identity.pci_bus_id)


def _skipped_by_line(read: Sequence[tuple[GpuIdentity, GpuReading]]) -> list[str]:
    """Each GPU's skipped line once, naming every GPU it holds for: `gpu 0,1,2,3 fabric info: ...`."""
    gpus: dict[str, list[str]] = {}
    for identity, reading in read:
        for line in reading.skipped:
            gpus.setdefault(line, []).append(str(identity.index))
    return [f"gpu {','.join(indices)} {line}" for line, indices in gpus.items()]


def _peak_flops_family(identities: Iterable[GpuIdentity]) -> Metric:
    family = gauge(catalog.GPU_PEAK_FLOPS)
    for identity in identities:
        for dtype, flops in peak_flops(identity.name).items():
            family.add_metric([*_ids(identity), dtype], flops)
    return family


def _ids(identity: GpuIdentity) -> list[str]:
    return [str(identity.index), identity.uuid]


def _value_families(read: Sequence[tuple[GpuIdentity, GpuReading]]) -> list[Metric]:
    families: list[Metric] = []
    for metric in GpuMetric:
        family = value_family(metric.family)
        split = len(metric.family.labels) > len(GPU_LABELS)  # one series per value of its own label
        for identity, reading in read:
            if not split:
                if metric in reading.values:
                    family.add_metric(_ids(identity), reading.values[metric])
            else:
                for label, value in reading.labelled.get(metric, {}).items():
                    family.add_metric([*_ids(identity), label], value)
        families.append(family)
    return families


def _interconnect_families(read: Sequence[tuple[GpuIdentity, GpuReading]]) -> list[Metric]:
    up, errors = gauge(catalog.GPU_NVLINK_LINK_UP), counter(catalog.GPU_NVLINK_ERRORS_TOTAL)
    for identity, reading in read:
        for link in reading.links:
            if link.up is not None:
                up.add_metric([*_ids(identity), str(link.link)], 1.0 if link.up else 0.0)
            for error, value in link.errors.items():
                if value:  # 18 links x 4 errors x 8 GPUs would be 576 series of zeros on a healthy node
                    errors.add_metric([*_ids(identity), str(link.link), error], value)
    state, mask = gauge(catalog.GPU_FABRIC_STATE_ID), gauge(catalog.GPU_FABRIC_HEALTH_MASK)
    for identity, reading in read:
        if reading.fabric is not None:
            state.add_metric(_ids(identity), float(reading.fabric.state))
            mask.add_metric(_ids(identity), float(reading.fabric.health_mask))
    return [up, errors, state, mask]


def _process_families(read: Sequence[tuple[GpuIdentity, GpuReading]], *, per_process: bool) -> list[Metric]:
    count, used = gauge(catalog.GPU_PROCESSES), gauge(catalog.GPU_PROCESS_FB_USED_BYTES)
    names: dict[int, str] = {}
    for identity, reading in read:
        if reading.processes is None:
            continue
        count.add_metric(_ids(identity), float(len(reading.processes)))
        for process in reading.processes if per_process else ():
            if process.fb_used_bytes is not None:
                used.add_metric([*_ids(identity), str(process.pid)], float(process.fb_used_bytes))
            names.setdefault(process.pid, _process_name(process.pid))
    if not per_process:
        return [count]
    described = info(catalog.GPU_PROCESS_INFO)
    for pid, name in sorted(names.items()):
        if name:
            described.add_metric([str(pid), name], {})
    return [count, used, described]


def _process_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return ""  # gone, or in another PID namespace


def _by_bus(gpus: Iterable[Gpu]) -> dict[str, GpuIdentity]:
    return {nvml_bus(gpu.identity.pci_bus_id): gpu.identity for gpu in gpus}


def _xid_families(counts: XidCounts, gpus: Iterable[Gpu]) -> list[Metric]:
    """XIDs of this node's GPUs (NVML has seen them since start); other buses' lines are only counted."""
    total, last = counter(catalog.GPU_XID_ERRORS_TOTAL), gauge(catalog.GPU_XID_LAST_TIMESTAMP_SECONDS)
    by_bus = _by_bus(gpus)
    for entry in sorted(counts.snapshot(), key=lambda e: (e.key.bus, e.key.xid)):
        identity = by_bus.get(entry.key.bus)
        if identity is None:
            continue
        key = [*_ids(identity), str(entry.key.xid)]
        total.add_metric(key, float(entry.count))
        last.add_metric(key, entry.last_seen)
    return [total, last]


def _health_history(settings: Settings, *, simulated: bool) -> tuple[StateFile, HealthHistory]:
    """The GPUs' health history, from the state file where there is one (never for the simulated node)."""
    state = StateFile(None if simulated else settings.state_dir, read_only=settings.state_read_only)
    boot_id = read_boot_id(settings.procfs)
    if simulated:
        state.disable("the simulated node keeps none")
    elif boot_id is None:
        state.disable(f"{settings.procfs / BOOT_ID} unreadable: a reboot cannot be told from a restart "
                      f"(--procfs names the host's /proc)")
    return state, HealthHistory(boot_id or "", state.load())


def _state_line(state: StateStatus) -> str:
    """The line `trainmon check` prints about the health history."""
    if state.persistent:
        return f"health history: {state.path} (kept across daemon restarts and reboots)"
    return f"health history: in memory only ({state.problem})"


def _signals(status: GpuStatus, xids: tuple[XidSeen, ...], memory: Memory) -> Signals:
    reading = status.reading
    if reading is None:
        return Signals(xids=xids, reset_at=memory.reset_at, recurred=memory.recurred, lost=status.lost,
                       reset_required=status.reset_required)
    return Signals(
        xids=xids, reset_at=memory.reset_at, recurred=memory.recurred, recovery_action=reading.recovery_action,
        row_remap_pending=reading.values.get(GpuMetric.ROW_REMAP_PENDING, 0.0) > 0,
        row_remap_failure=reading.values.get(GpuMetric.ROW_REMAP_FAILURE, 0.0) > 0,
        uncorrected_ecc=reading.labelled.get(GpuMetric.ECC_ERRORS_TOTAL, {}).get("uncorrected", 0.0),
    )


def _health_families(verdicts: Sequence[tuple[GpuIdentity, Verdict]]) -> list[Metric]:
    action, reason = gauge(catalog.GPU_HEALTH_ACTION), info(catalog.GPU_HEALTH_REASON_INFO)
    for identity, verdict in verdicts:
        action.add_metric([*_ids(identity), verdict.action.label], 1.0)
        for words in verdict.reasons:
            reason.add_metric(_ids(identity), {"reason": words})
    return [action, reason]


def _xid_source(kmsg: KmsgStatus | None) -> str:
    """The line `trainmon check` prints about where XIDs come from, and why."""
    if kmsg is None:
        return "XIDs: simulated NVML events"
    if kmsg.readable:
        return (f"XIDs: kernel log {kmsg.path} (history since boot, {kmsg.records} records read); NVML events "
                f"count only if it becomes unreadable")
    return f"XIDs: NVML events only, since start (kernel log unreadable: {kmsg.error})"


def _kmsg_details(kmsg: KmsgStatus | None, counts: XidCounts, gpus: Iterable[Gpu]) -> dict[str, object] | None:
    if kmsg is None:
        return None
    by_bus = _by_bus(gpus)
    foreign = sorted({e.key.bus for e in counts.snapshot() if e.key.bus not in by_bus})
    return {"path": kmsg.path, "readable": kmsg.readable, "error": kmsg.error, "records": kmsg.records,
            "xids": kmsg.xids, "malformed": kmsg.malformed, "lost": kmsg.lost,
            "other_buses": foreign[:MAX_LISTED_BUSES], "other_bus_count": len(foreign), "refused": counts.refused}


__all__ = ["GpuCollector", "count_pci_gpus"]
