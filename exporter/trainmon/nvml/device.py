"""One GPU: its identity, what it answers each cycle, and the state kept between cycles."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from trainmon.nvml import fields, gpm
from trainmon.nvml.backoff import Backoff
from trainmon.nvml.errors import NVML_FAILURES, is_absent, is_missing, is_not_found
from trainmon.nvml.metrics import GpuMetric
from trainmon.nvml.session import as_text

T = TypeVar("T")

MHZ = 1e6
MILLI = 1e-3
GPM = "SM activity (GPM)"
# nvmlDeviceGetTemperatureV came with R565; older drivers (most H100 fleets in 2026) only have this one.
TEMPERATURE_V = "temperature (falls back to nvmlDeviceGetTemperature)"

# Clock event (throttle) reason bits -> label value of trainmon_gpu_clocks_event_active.
CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle,
    "applications_clocks_setting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
    "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
    "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
    "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,
    "sw_thermal_slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
    "hw_thermal_slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
    "hw_power_brake_slowdown": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
    "display_clock_setting": pynvml.nvmlClocksEventReasonDisplayClockSetting,
}
ALL_REASONS = sum(CLOCK_EVENT_REASONS.values())
# Labelled metrics filled afresh each cycle (the PCIe link ones start from what `attach` read).
LABELLED_EACH_CYCLE = (GpuMetric.TEMPERATURE_CELSIUS, GpuMetric.CLOCK_HERTZ, GpuMetric.CLOCKS_EVENT_ACTIVE,
                       GpuMetric.THROTTLE_SECONDS_TOTAL, GpuMetric.ECC_ERRORS_TOTAL, GpuMetric.REMAPPED_ROWS_TOTAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuIdentity:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    minor_number: str


@dataclass(frozen=True, slots=True)
class ProcessUse:
    pid: int
    fb_used_bytes: int | None  # None where the driver cannot tell (WDDM, some containers)


@dataclass(frozen=True, slots=True)
class LinkReading:
    """One NVLink: up where the driver says (R570+), and its error counters where it has them."""

    link: int
    up: bool | None
    errors: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Fabric:
    state: int  # nvmlGpuFabricState_t: 0 not supported, 1 not started, 2 in progress, 3 completed
    health_mask: int  # NVML_GPU_FABRIC_HEALTH_MASK_* bit fields


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuReading:
    """One successful read of one GPU; a value the GPU did not answer is simply not in it."""

    values: Mapping[GpuMetric, float]
    labelled: Mapping[GpuMetric, Mapping[str, float]]  # metric -> label value -> value
    processes: tuple[ProcessUse, ...] | None
    skipped: tuple[str, ...]
    recovery_action: int | None = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; None before R565
    links: tuple[LinkReading, ...] = ()
    fabric: Fabric | None = None  # NVSwitch fabric (nvmlDeviceGetGpuFabricInfoV); None where there is none


def identify(index: int) -> tuple[Any, GpuIdentity]:
    """The handle and identity of the GPU at NVML index `index` (5 NVML calls, once per init)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    try:
        minor = str(pynvml.nvmlDeviceGetMinorNumber(handle))
    except pynvml.NVMLError:
        minor = ""
    identity = GpuIdentity(
        index=index,
        uuid=as_text(pynvml.nvmlDeviceGetUUID(handle)),
        name=as_text(pynvml.nvmlDeviceGetName(handle)),
        pci_bus_id=as_text(pynvml.nvmlDeviceGetPciInfo_v3(handle).busId),
        minor_number=minor,
    )
    return handle, identity


class _Reads:
    """Runs NVML getters for one GPU: an absent value is None (and noted), any other failure raises.

    A function the driver or the GPU lacks goes into `missing` (what -> line), which the GPU keeps until
    it is re-attached: such a function does not come back by itself, and some are not asked again. Any
    other absence (NO_PERMISSION, NO_DATA, ...) is this cycle's alone, in `skipped`.
    """

    def __init__(self, handle: Any, missing: dict[str, str]) -> None:
        self.handle = handle
        self.missing = missing
        self.skipped: list[str] = []
        self.not_in_driver: set[str] = set()  # what, where the function is not in this driver

    def get(self, what: str, call: Callable[..., T], *args: Any) -> T | None:
        try:
            value = call(self.handle, *args)
        except NVML_FAILURES as exc:
            if not is_absent(exc):
                raise
            if is_not_found(exc):
                self.not_in_driver.add(what)
            if is_missing(exc):
                why = "is not in this driver" if is_not_found(exc) else "is not supported on this GPU"
                self.missing[what] = f"{what}: {getattr(call, '__name__', 'NVML')} {why}"
            else:
                self.skipped.append(f"{what}: {exc}")
            return None
        self.missing.pop(what, None)
        return value


class Gpu:
    """A GPU across cycles and NVML re-initialisations: counters only grow, GPM windows follow on."""

    def __init__(self, identity: GpuIdentity, retry_s: float) -> None:
        """`retry_s`: the first wait before GPM is asked again after it refused a sample (then doubling)."""
        self.identity = identity
        self.handle: Any = None
        self._missing: dict[str, str] = {}  # what -> line, until re-attached (_Reads)
        self._gpm: gpm.GpmSampler | None = None
        self._gpm_retry = Backoff(initial=retry_s)
        self._gpm_refused = ""  # why the last GPM sample was refused, while waiting to ask again
        self._temperature_v = True
        self._memory_v2 = True
        self._reasons = ALL_REASONS
        self._static: dict[GpuMetric, dict[str, float]] = {}
        self._counters = {f.field_id: fields.Unwrapped() for f in fields.FIELDS if f.wraps}
        self._sm_active_s: float | None = None  # None until the first GPM window
        self._links: tuple[fields.LinkField, ...] = ()
        self._fabric = True  # asked until the driver says NOT_SUPPORTED, then not again until re-attached
        self._request: list[tuple[int, int]] = list(fields.REQUEST)

    def attach(self, handle: Any, identity: GpuIdentity, now: float) -> None:
        """Take a fresh handle after (re-)initialisation and read what does not change until the next.

        A fresh GPM sample is taken at once, so a re-initialisation between two cycles costs the next
        cycle no GPM window (at start-up the first cycle still has none: its window is under 100 ms).
        """
        self.handle, self.identity = handle, identity
        self._missing = {}
        reads = _Reads(handle, self._missing)
        self._reasons = reads.get("supported clock event reasons",
                                  pynvml.nvmlDeviceGetSupportedClocksEventReasons) or ALL_REASONS
        self._static = {GpuMetric.PCIE_LINK_GENERATION: {}, GpuMetric.PCIE_LINK_WIDTH: {}}
        for metric, call in ((GpuMetric.PCIE_LINK_GENERATION, pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
                             (GpuMetric.PCIE_LINK_WIDTH, pynvml.nvmlDeviceGetMaxPcieLinkWidth)):
            value = reads.get(metric.key, call)
            if value is not None:
                self._static[metric]["max"] = value
        count = reads.get("NVLink count", pynvml.nvmlDeviceGetFieldValues, [(fields.LINK_COUNT, 0)])
        links = fields.decode(count).get((fields.LINK_COUNT, 0)) if count is not None else None
        self._links = fields.link_fields(int(links.value)) if links is not None else ()
        self._request = [*fields.REQUEST, *((f.field_id, f.scope) for f in self._links)]
        self._fabric = True
        self._temperature_v = True
        self._gpm = gpm.sampler(handle)
        self._gpm_retry.succeeded()
        self._gpm_refused = ""
        if self._gpm is None:
            self._missing[GPM] = f"{GPM}: not on this GPU or driver (Hopper and later)"
        else:
            with contextlib.suppress(pynvml.NVMLError):  # unprimed, the first read takes the sample
                self._gpm.advance(now)
        for counter in self._counters.values():
            counter.rebase()

    @property
    def field_request(self) -> list[tuple[int, int]]:
        """The (field id, scope) pairs of each cycle's one nvmlDeviceGetFieldValues call."""
        return list(self._request)

    def detach(self) -> None:
        """Before nvmlShutdown: free what belongs to this NVML session."""
        if self._gpm is not None:
            self._gpm.close()
        self._gpm, self.handle = None, None

    def read(self, now: float) -> GpuReading:
        """Read this cycle's values (about 14 NVML calls).

        Raises:
            pynvml.NVMLError: the GPU failed a call in a way that is not "unsupported".
        """
        reads = _Reads(self.handle, self._missing)
        values: dict[GpuMetric, float] = {}
        labelled: dict[GpuMetric, dict[str, float]] = {name: dict(by_kind) for name, by_kind in self._static.items()}
        labelled.update((metric, {}) for metric in LABELLED_EACH_CYCLE)

        util = reads.get("utilization", pynvml.nvmlDeviceGetUtilizationRates)
        if util is not None:
            values[GpuMetric.UTILIZATION_RATIO] = util.gpu * gpm.PERCENT
        self._read_memory(reads, values)
        for metric, call, scale in ((GpuMetric.POWER_WATTS, pynvml.nvmlDeviceGetPowerUsage, MILLI),
                                    (GpuMetric.POWER_LIMIT_WATTS, pynvml.nvmlDeviceGetEnforcedPowerLimit, MILLI)):
            value = reads.get(metric.key, call)
            if value is not None:
                values[metric] = value * scale
        temperature = self._read_temperature(reads)
        if temperature is not None:
            labelled[GpuMetric.TEMPERATURE_CELSIUS]["gpu"] = temperature
        for clock, clock_id in (("sm", pynvml.NVML_CLOCK_SM), ("memory", pynvml.NVML_CLOCK_MEM)):
            value = reads.get(f"{clock} clock", pynvml.nvmlDeviceGetClockInfo, clock_id)
            if value is not None:
                labelled[GpuMetric.CLOCK_HERTZ][clock] = value * MHZ
        reasons = reads.get("clock event reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons)
        if reasons is not None:
            labelled[GpuMetric.CLOCKS_EVENT_ACTIVE] = {
                name: float(bool(reasons & bit)) for name, bit in CLOCK_EVENT_REASONS.items() if bit & self._reasons
            }
        for kind, call in ((GpuMetric.PCIE_LINK_GENERATION, pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
                           (GpuMetric.PCIE_LINK_WIDTH, pynvml.nvmlDeviceGetCurrPcieLinkWidth)):
            value = reads.get(kind.key, call)
            if value is not None:
                labelled[kind]["current"] = value
        answered = self._read_fields(reads, values, labelled)
        self._read_gpm(now, values, reads)
        recovery = answered.get((fields.RECOVERY_ACTION, 0))
        processes, fabric = self._read_processes(reads), self._read_fabric(reads)
        return GpuReading(
            values=values,
            labelled={name: by_label for name, by_label in labelled.items() if by_label},
            processes=processes,
            skipped=(*reads.skipped, *self._missing.values()),  # after every read
            recovery_action=int(recovery.value) if recovery is not None else None,
            links=self._read_links(answered),
            fabric=fabric,
        )

    def _read_temperature(self, reads: _Reads) -> int | None:
        if self._temperature_v:
            value = reads.get(TEMPERATURE_V, pynvml.nvmlDeviceGetTemperatureV, pynvml.NVML_TEMPERATURE_GPU)
            if value is not None or TEMPERATURE_V not in reads.not_in_driver:
                return value
            self._temperature_v = False  # a driver before R565: the older call from now on (its line stays)
        return reads.get("temperature", pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)

    def _read_memory(self, reads: _Reads, values: dict[GpuMetric, float]) -> None:
        if self._memory_v2:
            memory = reads.get("memory v2", pynvml.nvmlDeviceGetMemoryInfo, pynvml.nvmlMemory_v2)
            if memory is not None:
                values.update({GpuMetric.FB_TOTAL_BYTES: memory.total, GpuMetric.FB_USED_BYTES: memory.used,
                               GpuMetric.FB_FREE_BYTES: memory.free, GpuMetric.FB_RESERVED_BYTES: memory.reserved})
                return
            self._memory_v2 = False  # an older driver: v1 from now on, and no reserved series
        memory = reads.get("memory", pynvml.nvmlDeviceGetMemoryInfo)
        if memory is not None:
            values.update({GpuMetric.FB_TOTAL_BYTES: memory.total, GpuMetric.FB_USED_BYTES: memory.used,
                           GpuMetric.FB_FREE_BYTES: memory.free})

    def _read_fields(self, reads: _Reads, values: dict[GpuMetric, float],
                     labelled: dict[GpuMetric, dict[str, float]]) -> dict[tuple[int, int], fields.RawField]:
        """Fills the field-value metrics; returns every answered field by id."""
        answer = reads.get("field values", pynvml.nvmlDeviceGetFieldValues, self._request)
        if answer is None:
            return {}
        answered = fields.decode(answer)
        for field in fields.FIELDS:
            raw = answered.get((field.field_id, field.scope))
            if raw is None:
                continue
            value = (self._counters[field.field_id].update(raw) if field.wraps else raw.value) * field.scale
            if field.label is None:
                values[field.metric] = value
            else:
                labelled[field.metric][field.label] = value
        return answered

    def _read_fabric(self, reads: _Reads) -> Fabric | None:
        if not self._fabric:
            return None
        info = pynvml.c_nvmlGpuFabricInfoV_t()
        # pynvml passes its second argument through as is: the C function takes a pointer.
        if reads.get("fabric info", pynvml.nvmlDeviceGetGpuFabricInfoV, ctypes.byref(info)) is None:
            self._fabric = False
            return None
        return Fabric(int(info.state), int(info.healthMask))

    def _read_links(self, answered: Mapping[tuple[int, int], fields.RawField]) -> tuple[LinkReading, ...]:
        """Per link, what the batched call answered; a link with no answer at all is left out."""
        state: dict[int, bool] = {}
        errors: dict[int, dict[str, float]] = {}
        for field in self._links:
            raw = answered.get((field.field_id, field.scope))
            if raw is None:
                continue
            if field.error is None:
                state[field.link] = raw.value == fields.LINK_ACTIVE
            else:
                errors.setdefault(field.link, {})[field.error] = raw.value
        return tuple(LinkReading(link, state.get(link), errors.get(link, {}))
                     for link in sorted(state.keys() | errors.keys()))

    def _read_gpm(self, now: float, values: dict[GpuMetric, float], reads: _Reads) -> None:
        window = self._gpm_window(self._gpm, now, reads) if self._gpm is not None else None
        if self._gpm_refused:
            reads.skipped.append(f"{GPM}: {self._gpm_refused}; asked again in {self._gpm_retry.retry_in(now):.0f}s")
        sm = None
        if window is not None:
            values.update(window.ratios)
            sm = window.ratios.get(GpuMetric.SM_UTILIZATION_RATIO)
        if sm is not None and window is not None:
            self._sm_active_s = (self._sm_active_s or 0.0) + sm * window.seconds
        if self._sm_active_s is not None:
            values[GpuMetric.SM_ACTIVE_SECONDS_TOTAL] = self._sm_active_s

    def _gpm_window(self, sampler: gpm.GpmSampler, now: float, reads: _Reads) -> gpm.GpmWindow | None:
        """This cycle's GPM window. A refused sample (NO_PERMISSION: DCGM saw it come and go in unprivileged
        containers) skips the window and asks again with back-off; GPM gone from the GPU (MIG mode, for
        one) turns the SM series off until the next re-initialisation."""
        if not self._gpm_retry.ready(now):
            return None
        try:
            window = sampler.advance(now)
        except NVML_FAILURES as exc:
            if not is_absent(exc):
                raise
            if is_missing(exc):
                reads.missing[GPM] = f"{GPM}: {exc}"
                sampler.close()
                self._gpm, self._gpm_refused = None, ""
            else:
                sampler.restart()
                self._gpm_retry.failed(now)
                self._gpm_refused = f"sample refused ({exc}), window skipped"
            return None
        self._gpm_retry.succeeded()
        self._gpm_refused = ""
        return window

    def _read_processes(self, reads: _Reads) -> tuple[ProcessUse, ...] | None:
        found = reads.get("compute processes", pynvml.nvmlDeviceGetComputeRunningProcesses)
        if found is None:
            return None
        return tuple(ProcessUse(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                     for p in found)
