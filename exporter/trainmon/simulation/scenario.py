"""A Python stand-in for `libnvidia-ml.so.1`, answering pynvml at its `pynvml.nvmlLib` boundary.

pynvml resolves every C function with `getattr(nvmlLib, "nvml…")` and calls it with ctypes
arguments, so an object whose attributes are Python functions of the same C signatures drives
pynvml's real wrappers, structs and error classes unchanged. `ScenarioLibrary` answers from a
scenario: the same JSON model that the C fake in `tests/fake_nvml/` reads, so `trainmon demo`,
the unit tests and the subprocess tests agree on what a value means.

Scenario (every per-GPU key is optional; an absent key answers NOT_SUPPORTED)::

    {"driver_version": "550.54.15", "init_error": 0,
     "gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-…", "pci_bus_id": "00000000:18:00.0",
               "minor_number": 0, "utilization_gpu": 37, "utilization_memory": 12,
               "memory_total": 85520809984, "memory_reserved": 566231040,
               "memory_used": 1073741824, "memory_free": 83880837120,
               "temperature_gpu": 45, "power_usage_mw": 312000, "power_limit_mw": 700000,
               "clock_sm_mhz": 1980, "clock_memory_mhz": 2619,
               "clocks_event_reasons": 4, "supported_clocks_event_reasons": 511,
               "pcie_link_gen": 5, "pcie_link_gen_max": 5, "pcie_link_width": 16, "pcie_link_width_max": 16,
               "fields": {"83": 123456789, "82": 40},          # nvmlDeviceGetFieldValues, by field id
                                                               # ("163@2": field 163 with scope 2 only)
               "field_types": {"197": 1},                      # nvmlValueType_t (default: ULL, or double)
               "fabric_state": 3, "fabric_health_mask": 0,      # nvmlDeviceGetGpuFabricInfoV (absent: none)
               "processes": [{"pid": 4242, "used_memory": 536870912}],
               "gpm_supported": true, "gpm": {"2": 55.5},       # GPM metric id -> percent
               "xid_supported": true,
               "errors": {"nvmlDeviceGetPowerUsage": 3, "*": 15},  # per C symbol, "*" = every call
               "hang_ms": 0}],                                   # every call on the GPU takes this long
     "xid_events": [{"id": 1, "gpu": 1, "xid": 79}]}

An XID event happens when a scenario that contains its `id` is first seen; an event set only
receives events that happen after it was created, as with the real driver.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pynvml

Scenario = Mapping[str, Any]
ScenarioSource = Callable[[], Scenario]

XID_EVENT = pynvml.nvmlEventTypeXidCriticalError
_UNSET_ID = 0xFFFFFFFF
# How often a waiting event set looks for new events. Each look runs the scenario, which rebuilds every GPU: at
# 0.1 s that was a third of an idle demo's CPU. An XID reaching the daemon half a second late changes nothing.
_WAIT_STEP_S = 0.5
# Symbols answered before nvmlInit; everything else is UNINITIALIZED until then.
_WITHOUT_INIT = frozenset({"nvmlInitWithFlags", "nvmlInit_v2", "nvmlInit", "nvmlErrorString"})
# Symbols whose first argument is not a device handle; every other one gets per-GPU error injection.
_NOT_PER_DEVICE = _WITHOUT_INIT | {
    "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
    "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmMetricsGet",
    "nvmlEventSetCreate", "nvmlEventSetWait_v2", "nvmlEventSetFree",
}


def static_source(scenario: Scenario) -> ScenarioSource:
    return lambda: scenario


class _Symbol:
    """One C function: pynvml sets attributes such as `restype` on what `getattr` returns."""

    def __init__(self, library: ScenarioLibrary, name: str, impl: Callable[..., int]) -> None:
        self._library = library
        self._name = name
        self._impl = impl
        self.restype: object = ctypes.c_int

    def __call__(self, *args: Any) -> Any:
        return self._library.dispatch(self._name, self._impl, args)


@dataclass
class _EventSet:
    generation: int
    cursor: int
    devices: set[int] = field(default_factory=set)


@dataclass
class _GpmSample:
    gpu: int | None = None


def _target(arg: Any) -> Any:
    """The ctypes object behind `byref(x)` (a CArgObject) or `x` itself."""
    return getattr(arg, "_obj", arg)


def _int(arg: Any) -> int:
    return int(getattr(arg, "value", arg))


def _address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class ScenarioLibrary:
    """Answers pynvml's C calls from `source()`; `calls` counts them (the benchmark reads it), `calls_by_name` each
    function's (the XID listener's thread calls too, so a test of one function counts that one)."""

    def __init__(self, source: ScenarioSource) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._initialised = 0
        self._generation = 0
        self._seen_events: set[object] = set()
        self._event_log: list[tuple[int, int]] = []  # (gpu index, xid) in the order they happened
        self._last_scenario: Scenario | None = None
        self._samples: dict[int, _GpmSample] = {}
        self._event_sets: dict[int, _EventSet] = {}
        self.calls = 0
        self.calls_by_name: Counter[str] = Counter()

    def __getattr__(self, name: str) -> _Symbol:
        impl = getattr(type(self), "_" + name, None)
        if impl is None or not name.startswith("nvml"):
            raise AttributeError(name)  # pynvml turns this into NVMLError_FunctionNotFound
        return _Symbol(self, name, impl.__get__(self))

    # --- plumbing -----------------------------------------------------------------------------

    def scenario(self) -> Scenario:
        scenario = self._source()
        if scenario is not self._last_scenario:
            with self._lock:
                self._last_scenario = scenario
                for event in scenario.get("xid_events", ()):
                    if event["id"] not in self._seen_events:
                        self._seen_events.add(event["id"])
                        self._event_log.append((int(event["gpu"]), int(event["xid"])))
        return scenario

    @property
    def watched(self) -> bool:
        """Whether an XID event set exists: events from now on reach it."""
        return bool(self._event_sets)

    def _gpus(self) -> list[Mapping[str, Any]]:
        return list(self.scenario().get("gpus", ()))

    def dispatch(self, name: str, impl: Callable[..., int], args: tuple[Any, ...]) -> Any:
        self.calls += 1
        self.calls_by_name[name] += 1
        if name not in _WITHOUT_INIT and not self._initialised:
            return pynvml.NVML_ERROR_UNINITIALIZED
        if name not in _NOT_PER_DEVICE:
            gpu = self._gpu_of(args[0])
            if gpu is None:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            hang_ms = self._gpus()[gpu].get("hang_ms", 0)
            if hang_ms:
                time.sleep(hang_ms / 1000)
            errors = self._gpus()[gpu].get("errors", {})
            injected = errors.get(name, errors.get("*", 0))
            if injected:
                return int(injected)
            return impl(self._gpus()[gpu], gpu, *args[1:])
        return impl(*args)

    def _gpu_of(self, handle: Any) -> int | None:
        index = _address(handle) - 1
        return index if 0 <= index < len(self._gpus()) else None

    @staticmethod
    def _scalar(gpu: Mapping[str, Any], key: str, out: Any) -> int:
        if key not in gpu:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        _target(out).value = gpu[key]
        return pynvml.NVML_SUCCESS

    # --- init, system, enumeration ----------------------------------------------------------------

    def _nvmlInitWithFlags(self, flags: Any) -> int:
        error = int(self.scenario().get("init_error", 0))
        if error:
            return error
        with self._lock:
            if not self._initialised:
                self._generation += 1
            self._initialised += 1
        return pynvml.NVML_SUCCESS

    def _nvmlShutdown(self) -> int:
        with self._lock:
            self._initialised = max(0, self._initialised - 1)
        return pynvml.NVML_SUCCESS

    def _nvmlErrorString(self, code: Any) -> bytes:
        return f"fake NVML error {_int(code)}".encode()

    def _nvmlSystemGetDriverVersion(self, buffer: Any, size: Any) -> int:
        version = str(self.scenario().get("driver_version", "")).encode()
        if len(version) + 1 > _int(size):
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(buffer, version + b"\0", len(version) + 1)
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetCount_v2(self, out: Any) -> int:
        _target(out).value = len(self._gpus())
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:
        index = _int(index)
        if not 0 <= index < len(self._gpus()):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        ctypes.c_void_p.from_buffer(_target(out)).value = index + 1
        return pynvml.NVML_SUCCESS

    # --- identity ------------------------------------------------------------------------------------

    @staticmethod
    def _string(gpu: Mapping[str, Any], key: str, buffer: Any, size: Any) -> int:
        if key not in gpu:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        text = str(gpu[key]).encode()
        if len(text) + 1 > _int(size):
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(buffer, text + b"\0", len(text) + 1)
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetName(self, gpu: Mapping[str, Any], index: int, buffer: Any, size: Any) -> int:
        return self._string(gpu, "name", buffer, size)

    def _nvmlDeviceGetUUID(self, gpu: Mapping[str, Any], index: int, buffer: Any, size: Any) -> int:
        return self._string(gpu, "uuid", buffer, size)

    def _nvmlDeviceGetMinorNumber(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        return self._scalar(gpu, "minor_number", out)

    def _nvmlDeviceGetPciInfo_v3(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        if "pci_bus_id" not in gpu:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        info = _target(out)
        bus_id = str(gpu["pci_bus_id"]).encode()
        info.busId = bus_id
        info.busIdLegacy = bus_id[-12:]
        info.pciDeviceId = int(gpu.get("pci_device_id", 0x233010DE))
        return pynvml.NVML_SUCCESS

    # --- telemetry -------------------------------------------------------------------------------------

    def _nvmlDeviceGetUtilizationRates(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        if "utilization_gpu" not in gpu:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        util = _target(out)
        util.gpu = int(gpu["utilization_gpu"])
        util.memory = int(gpu.get("utilization_memory", 0))
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetMemoryInfo(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        if "memory_total" not in gpu:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        memory = _target(out)
        memory.total, memory.free = int(gpu["memory_total"]), int(gpu["memory_free"])
        memory.used = int(gpu["memory_used"]) + int(gpu.get("memory_reserved", 0))  # v1: reserved + allocated
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetMemoryInfo_v2(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        memory = _target(out)
        if memory.version != pynvml.nvmlMemory_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if "memory_total" not in gpu:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        memory.total, memory.free = int(gpu["memory_total"]), int(gpu["memory_free"])
        memory.used, memory.reserved = int(gpu["memory_used"]), int(gpu.get("memory_reserved", 0))
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetTemperatureV(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        reading = _target(out)
        if reading.version != pynvml.nvmlTemperature_v1:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if reading.sensorType != pynvml.NVML_TEMPERATURE_GPU or "temperature_gpu" not in gpu:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        reading.temperature = int(gpu["temperature_gpu"])
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetPowerUsage(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        return self._scalar(gpu, "power_usage_mw", out)

    def _nvmlDeviceGetEnforcedPowerLimit(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        return self._scalar(gpu, "power_limit_mw", out)

    def _nvmlDeviceGetClockInfo(self, gpu: Mapping[str, Any], index: int, clock: Any, out: Any) -> int:
        key = {pynvml.NVML_CLOCK_SM: "clock_sm_mhz", pynvml.NVML_CLOCK_MEM: "clock_memory_mhz"}.get(_int(clock))
        return self._scalar(gpu, key, out) if key else pynvml.NVML_ERROR_NOT_SUPPORTED

    def _nvmlDeviceGetCurrentClocksEventReasons(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        return self._scalar(gpu, "clocks_event_reasons", out)

    def _nvmlDeviceGetSupportedClocksEventReasons(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        return self._scalar(gpu, "supported_clocks_event_reasons", out)

    def _nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        return self._scalar(gpu, "pcie_link_gen", out)

    def _nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        return self._scalar(gpu, "pcie_link_gen_max", out)

    def _nvmlDeviceGetCurrPcieLinkWidth(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        return self._scalar(gpu, "pcie_link_width", out)

    def _nvmlDeviceGetMaxPcieLinkWidth(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        return self._scalar(gpu, "pcie_link_width_max", out)

    def _nvmlDeviceGetGpuFabricInfoV(self, gpu: Mapping[str, Any], index: int, info: Any) -> int:
        if "fabric_state" not in gpu:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        out = _target(info)
        out.status, out.state = pynvml.NVML_SUCCESS, gpu["fabric_state"]
        out.healthMask = gpu.get("fabric_health_mask", 0)
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetFieldValues(self, gpu: Mapping[str, Any], index: int, count: Any, values: Any) -> int:
        fields, types = gpu.get("fields", {}), gpu.get("field_types", {})
        array = _target(values)
        now_us = int(time.time() * 1e6)
        for i in range(_int(count)):
            entry = array[i]
            value = fields.get(f"{entry.fieldId}@{entry.scopeId}", fields.get(str(entry.fieldId)))
            entry.timestamp = now_us
            if value is None:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            default = pynvml.NVML_VALUE_TYPE_DOUBLE if isinstance(value, float) else \
                pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            entry.nvmlReturn, entry.valueType = pynvml.NVML_SUCCESS, int(types.get(str(entry.fieldId), default))
            if entry.valueType == pynvml.NVML_VALUE_TYPE_DOUBLE:
                entry.value.dVal = float(value)
            elif entry.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
                entry.value.uiVal = int(value)
            else:
                entry.value.ullVal = int(value)
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetComputeRunningProcesses_v3(self, gpu: Mapping[str, Any], index: int,
                                                 count: Any, infos: Any) -> int:
        processes = gpu.get("processes", [])
        size = _target(count)
        if not processes:
            size.value = 0
            return pynvml.NVML_SUCCESS
        if infos is None or size.value < len(processes):
            size.value = len(processes)
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        for slot, process in zip(infos, processes, strict=False):
            slot.pid, slot.usedGpuMemory = int(process["pid"]), int(process["used_memory"])
            slot.gpuInstanceId = slot.computeInstanceId = _UNSET_ID
        size.value = len(processes)
        return pynvml.NVML_SUCCESS

    # --- GPM -------------------------------------------------------------------------------------------

    def _nvmlGpmQueryDeviceSupport(self, gpu: Mapping[str, Any], index: int, out: Any) -> int:
        support = _target(out)
        if support.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        support.isSupportedDevice = int(bool(gpu.get("gpm_supported", False)))
        return pynvml.NVML_SUCCESS

    def _nvmlGpmSampleAlloc(self, out: Any) -> int:
        sample = _GpmSample()
        key = id(sample)
        self._samples[key] = sample
        ctypes.c_void_p.from_buffer(_target(out)).value = key
        return pynvml.NVML_SUCCESS

    def _nvmlGpmSampleFree(self, sample: Any) -> int:
        return pynvml.NVML_SUCCESS if self._samples.pop(_address(sample), None) \
            else pynvml.NVML_ERROR_INVALID_ARGUMENT

    def _nvmlGpmSampleGet(self, gpu: Mapping[str, Any], index: int, sample: Any) -> int:
        if not gpu.get("gpm_supported", False):
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        found = self._samples.get(_address(sample))
        if found is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        found.gpu = index
        return pynvml.NVML_SUCCESS

    def _nvmlGpmMetricsGet(self, out: Any) -> int:
        request = _target(out)
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        samples = self._samples
        first, second = samples.get(_address(request.sample1)), samples.get(_address(request.sample2))
        if first is None or second is None or first.gpu is None or first.gpu != second.gpu:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        values = self._gpus()[first.gpu].get("gpm", {})
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            value = values.get(str(metric.metricId))
            metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED if value is None else pynvml.NVML_SUCCESS
            metric.value = float(value or 0.0)
        return pynvml.NVML_SUCCESS

    # --- events ------------------------------------------------------------------------------------------

    def _nvmlEventSetCreate(self, out: Any) -> int:
        self.scenario()  # events already in the scenario happened before this set existed
        event_set = _EventSet(generation=self._generation, cursor=len(self._event_log))
        self._event_sets[id(event_set)] = event_set
        ctypes.c_void_p.from_buffer(_target(out)).value = id(event_set)
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceRegisterEvents(self, gpu: Mapping[str, Any], index: int, types: Any, handle: Any) -> int:
        event_set = self._event_sets.get(_address(handle))
        if event_set is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        if _int(types) & ~XID_EVENT or not gpu.get("xid_supported", True):
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        event_set.devices.add(index)
        return pynvml.NVML_SUCCESS

    def _nvmlEventSetWait_v2(self, handle: Any, out: Any, timeout_ms: Any) -> int:
        event_set = self._event_sets.get(_address(handle))
        if event_set is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        deadline = time.monotonic() + _int(timeout_ms) / 1000
        while True:
            if event_set.generation != self._generation or not self._initialised:
                return pynvml.NVML_ERROR_UNINITIALIZED
            self.scenario()
            with self._lock:
                while event_set.cursor < len(self._event_log):
                    gpu, xid = self._event_log[event_set.cursor]
                    event_set.cursor += 1
                    if gpu in event_set.devices:
                        data = _target(out)
                        ctypes.c_void_p.from_buffer(data, 0).value = gpu + 1
                        data.eventType, data.eventData = XID_EVENT, xid
                        data.gpuInstanceId = data.computeInstanceId = _UNSET_ID
                        return pynvml.NVML_SUCCESS
            if time.monotonic() >= deadline:
                return pynvml.NVML_ERROR_TIMEOUT
            time.sleep(_WAIT_STEP_S)

    def _nvmlEventSetFree(self, handle: Any) -> int:
        found = self._event_sets.pop(_address(handle), None)
        return pynvml.NVML_SUCCESS if found else pynvml.NVML_ERROR_INVALID_ARGUMENT
