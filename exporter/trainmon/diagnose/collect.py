"""The PromQL `trainmon diagnose` asks, over raw series only (it works without the recording rules)."""

from __future__ import annotations

import json
import math
import re
import urllib.request
from collections.abc import Callable

from trainmon.catalog import Family, fs, gpu, infiniband, nvme, training
from trainmon.diagnose.model import Hardware, MountSignals, Rank, RankStack
from trainmon.diagnose.prometheus import PrometheusClient, Sample

BY_RANK = "instance, rank"
# As TrainmonNVMeLatencyHigh: over the floor and this many times the window before or the node's fastest drive of
# the same model, or over the absolute figure.
NVME_LATENCY_FLOOR_SECONDS = 0.002
NVME_SLOW_FACTOR = 10
NVME_LATENCY_SECONDS = 0.05
# One increase() each: increase() drops the name, so over a name regex a port's counters would collide.
IB_ERROR_COUNTERS = (infiniband.INFINIBAND_SYMBOL_ERROR_TOTAL, infiniband.INFINIBAND_LINK_DOWNED_TOTAL,
                     infiniband.INFINIBAND_PORT_ERRORS_RECEIVED_TOTAL)
RANK_COUNTERS = {
    "steps": training.TRAIN_STEPS_TOTAL.name,
    "step_seconds": training.TRAIN_STEP_DURATION_SECONDS.sum,
    "tokens": training.TRAIN_TOKENS_TOTAL.name,
    "comm_wait": training.TRAIN_COMM_WAIT_SECONDS_TOTAL.name,
    "data_wait": training.TRAIN_DATALOADER_WAIT_SECONDS_TOTAL.name,
    "model_flops": training.TRAIN_MODEL_FLOPS_TOTAL.name,
    "grad_norm_spikes": training.TRAIN_GRAD_NORM_SPIKES_TOTAL.name,
    "loss_spikes": training.TRAIN_LOSS_SPIKES_TOTAL.name,
}
FLIGHT_RECORDER_ENV = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
MAX_RANKS_BYTES = 16 << 20  # /api/v1/ranks of a node: at most a few thousand ranks of 4 KiB stacks
RANK = re.compile(r"[0-9]{1,9}")  # a rank label that is not one (`abc`, `1e400`, `-1`, huge) is skipped, and said
# Throttle reasons: a slowdown (thermal, hardware) or the power cap.
SLOWDOWN = 'reason=~".*slowdown"'
POWER_CAP = 'reason=~"sw_power_cap|hw_power_brake_slowdown"'


def quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def any_of(values: set[str]) -> str:
    """A PromQL regex literal matching exactly one of `values`."""
    return quote("|".join(re.escape(v) for v in sorted(values)))


class Collector:
    """Reads one job's ranks and its nodes' hardware signals at `now` over the last `window` seconds.

    `unusable_ranks` holds the (instance, rank label) pairs whose label is not a rank number: skipped.
    """

    def __init__(self, client: PrometheusClient, now: float, window: int, dtype: str = "bf16") -> None:
        self._client = client
        self._now = now
        self._range = f"[{window}s]"
        self._window = window
        self._dtype = dtype
        self.unusable_ranks: set[tuple[str, str]] = set()

    def _by_rank(self, query: str) -> dict[tuple[str, int], float]:
        """Each rank's value; ±Inf is no count or time of a rank, and is left out like NaN."""
        found = {}
        for sample in self._client.vector(query, self._now):
            key = self._rank_key(sample)
            if key is not None and math.isfinite(sample.value):
                found[key] = sample.value
        return found

    def _rank_key(self, sample: Sample) -> tuple[str, int] | None:
        instance, rank = sample.labels.get("instance", ""), sample.labels.get("rank", "")
        if RANK.fullmatch(rank):
            return instance, int(rank)
        self.unusable_ranks.add((instance, rank))
        return None

    def ranks(self, job_id: str) -> list[Rank]:
        sel = f"{{job_id={quote(job_id)}}}"
        seen = {key: s.labels.get("uuid", "")
                for s in self._client.vector(
                    f"max by ({BY_RANK}, uuid) (last_over_time({training.TRAIN_RANK_INFO}{sel}{self._range}))",
                    self._now)
                if (key := self._rank_key(s)) is not None}
        if not seen:
            return []
        live = self._by_rank(f"max by ({BY_RANK}) ({training.TRAIN_RANK_INFO}{sel})")
        started = self._by_rank(f"max by ({BY_RANK}) "
                                f"(last_over_time({training.TRAIN_PROCESS_START_TIMESTAMP_SECONDS}{sel}{self._range}))")
        counters = {field: self._by_rank(f"sum by ({BY_RANK}) (increase({metric}{sel}{self._range}))")
                    for field, metric in RANK_COUNTERS.items()}
        phases: dict[tuple[str, int], dict[str, float]] = {}
        for s in self._client.vector(f"sum by ({BY_RANK}, phase) "
                                     f"(increase({training.TRAIN_PHASE_SECONDS_TOTAL}{sel}{self._range}))", self._now):
            key = self._rank_key(s)
            if key is not None and s.value > 0 and math.isfinite(s.value):
                phases.setdefault(key, {})[s.labels.get("phase", "")] = s.value
        in_phase = self._by_rank(f"max by ({BY_RANK}) ({training.TRAIN_PHASE}{sel})")
        last_step = self._by_rank(f"max by ({BY_RANK}) ({training.TRAIN_LAST_STEP_TIMESTAMP_SECONDS}{sel})")
        stages = self._by_rank(f"max by ({BY_RANK}) "
                               f"(last_over_time({training.TRAIN_PIPELINE_STAGE}{sel}{self._range}))")
        inflight = self._by_rank(f"max by ({BY_RANK}) ({training.NCCL_INFLIGHT_OLDEST_SECONDS}{sel})")
        spike_steps = self._spike_steps(sel)
        peaks = self._peaks({instance for instance, _ in seen})
        hung = self._labels(f"max by ({BY_RANK}, location) ({training.TRAIN_HANG_LOCATION}{sel})", "location")
        signatures = self._labels(f"max by ({BY_RANK}, signature) ({training.TRAIN_STACK_INFO}{sel})", "signature")
        issued = self._by_rank_and(f'max by ({BY_RANK}, group) ({training.NCCL_ISSUED_TOTAL}{{job_id={quote(job_id)}, '
                                   f'group!="other"}})', "group")
        timeout_left = self._by_rank(
            f"min by ({BY_RANK}) ({training.TRAIN_PG_TIMEOUT_SECONDS}{sel} - on (instance, job_id, rank, group) "
            f"max by (instance, job_id, rank, group) ({training.NCCL_INFLIGHT_OLDEST_SECONDS}{sel}))")
        env = self._by_rank_and(f'max by ({BY_RANK}, name, value) ({training.TRAIN_NCCL_ENV_INFO}{{job_id='
                                f'{quote(job_id)}, name=~"{"|".join(FLIGHT_RECORDER_ENV)}"}})', "name", "value")
        out = []
        for key, uuid in sorted(seen.items()):
            start = started.get(key)
            present = self._window if start is None else min(self._window, max(self._now - start, 0.0))
            out.append(Rank(
                rank=key[1], instance=key[0], uuid=uuid, seconds=present,
                steps=counters["steps"].get(key, 0.0), step_seconds=counters["step_seconds"].get(key, 0.0),
                tokens=counters["tokens"].get(key, 0.0),
                pipeline_stage=int(stages[key]) if key in stages else None,
                comm_wait=counters["comm_wait"].get(key, 0.0), data_wait=counters["data_wait"].get(key, 0.0),
                phases=phases.get(key, {}), model_flops=counters["model_flops"].get(key),
                peak_flops=peaks.get((key[0], uuid)), live=key in live, in_phase=key in in_phase,
                since_last_step=self._now - last_step[key] if key in last_step else None,
                inflight=inflight.get(key, 0.0), grad_norm_spikes=counters["grad_norm_spikes"].get(key, 0.0),
                loss_spikes=counters["loss_spikes"].get(key, 0.0), spike_steps=spike_steps.get(key),
                hung=hung.get(key), signature=signatures.get(key, ""),
                issued={group: n for group, n in issued.get(key, {}).items() if isinstance(n, float)},
                timeout_left=timeout_left.get(key),
                nccl_env={name: value for name, value in env.get(key, {}).items() if isinstance(value, str)}))
        return out

    def _labels(self, query: str, label: str) -> dict[tuple[str, int], str]:
        """Each rank's value of `label` (one per rank: the last one answered wins)."""
        return {key: s.labels.get(label, "") for s in self._client.vector(query, self._now)
                if (key := self._rank_key(s)) is not None}

    def _by_rank_and(self, query: str, label: str, value_label: str = "") -> dict[tuple[str, int], dict[str, object]]:
        """Each rank's samples keyed by `label`: their value, or their `value_label` when given."""
        found: dict[tuple[str, int], dict[str, object]] = {}
        for s in self._client.vector(query, self._now):
            key = self._rank_key(s)
            if key is not None and math.isfinite(s.value):
                found.setdefault(key, {})[s.labels.get(label, "")] = (
                    s.labels.get(value_label, "") if value_label else s.value)
        return found

    def _spike_steps(self, sel: str) -> dict[tuple[str, int], tuple[float, float]]:
        """Each rank's step counter at the first and the last evaluation (every 15 s, or a tenth of a short window)
        whose last minute saw a spike counter rise: the spikes' steps, to within a minute of steps."""
        rose = (f"increase({training.TRAIN_GRAD_NORM_SPIKES_TOTAL}{sel}[1m]) > 0 "
                f"or increase({training.TRAIN_LOSS_SPIKES_TOTAL}{sel}[1m]) > 0")
        at_spike = f"(max by ({BY_RANK}) ({training.TRAIN_STEPS_TOTAL}{sel}) and on ({BY_RANK}) ({rose}))"
        every = max(1, min(15, self._window // 10))
        first = self._by_rank(f"min_over_time({at_spike}[{self._window}s:{every}s])")
        last = self._by_rank(f"max_over_time({at_spike}[{self._window}s:{every}s])")
        return {key: (first[key], last.get(key, first[key])) for key in first}

    def _peaks(self, instances: set[str]) -> dict[tuple[str, str], float]:
        query = f"max by (instance, uuid) ({gpu.GPU_PEAK_FLOPS}{{instance=~{any_of(instances)}, " \
                f"dtype={quote(self._dtype)}}})"
        return {(s.labels.get("instance", ""), s.labels.get("uuid", "")): s.value
                for s in self._client.vector(query, self._now)}

    def mounts(self, instances: set[str]) -> list[MountSignals]:
        """Each network file-system mount of these nodes: the window, and the window just before it."""
        on = f"instance=~{any_of(instances)}"
        fields: dict[str, str] = {  # RANGE: the window, or the window before it
            "read_rate": f"rate({fs.FS_READ_BYTES_TOTAL}{{{on}}}RANGE)",
            "rpc_latency": f"increase({fs.FS_RPC_SECONDS_TOTAL}{{{on}}}RANGE)"
                           f" / increase({fs.FS_RPCS_TOTAL}{{{on}}}RANGE)",
            "timeouts": f"increase({fs.FS_RPC_TIMEOUTS_TOTAL}{{{on}}}RANGE)",
            "metadata_rate": f'sum without (op) (rate({fs.FS_OPERATIONS_TOTAL}{{{on}, op!~"read|write"}}RANGE))',
        }
        values: dict[tuple[str, str], dict[str, float]] = {}
        for name, template in fields.items():
            for suffix, window in (("", self._range), ("_before", f"{self._range} offset {self._window}s")):
                for sample in self._client.vector(template.replace("RANGE", window), self._now):
                    values.setdefault(_mount_key(sample), {})[name + suffix] = sample.value
        return [MountSignals(instance=instance, mount=mount, **found)
                for (instance, mount), found in sorted(values.items())]

    def hardware(self, instances: set[str]) -> list[Hardware]:
        """The signals on these nodes within the window."""
        on = f"instance=~{any_of(instances)}"
        r = self._range
        queries: dict[str, tuple[str, Callable[[Sample], str]]] = {
            "throttle": (f'max by (instance, uuid) (max_over_time({gpu.GPU_CLOCKS_EVENT_ACTIVE}{{{on}, '
                         f'{SLOWDOWN}}}{r})) == 1 or sum by (instance, uuid) (increase('
                         f'{gpu.GPU_THROTTLE_SECONDS_TOTAL}{{{on}, reason=~".*thermal.*"}}{r})) > 0', _uuid),
            "power_cap": (f"max by (instance, uuid) (max_over_time({gpu.GPU_CLOCKS_EVENT_ACTIVE}{{{on}, "
                          f"{POWER_CAP}}}{r})) == 1", _uuid),
            # An SM clock 5% under the best GPU of its node: the node's peers are the reference.
            "clocks": (f'max by (instance, uuid) (avg_over_time({gpu.GPU_CLOCK_HERTZ}{{{on}, clock="sm"}}{r})) '
                       f'< on (instance) group_left 0.95 * max by (instance) (avg_over_time('
                       f'{gpu.GPU_CLOCK_HERTZ}{{{on}, clock="sm"}}{r}))', _uuid),
            # A link trained below what it can do (a reseat or a riser), either figure.
            "pcie_link": (" or ".join(
                f'min_over_time({link}{{kind="current", {on}}}{r}) < on (instance, gpu, uuid) '
                f'{link}{{kind="max", {on}}}' for link in (gpu.GPU_PCIE_LINK_WIDTH, gpu.GPU_PCIE_LINK_GENERATION)),
                _uuid),
            "xid": (f"max by (instance, uuid) ({gpu.GPU_XID_LAST_TIMESTAMP_SECONDS}{{{on}}}) "
                    f"> {self._now - self._window:.3f}", _uuid),
            "ecc": (f"sum by (instance, uuid) (increase({gpu.GPU_ECC_ERRORS_TOTAL}{{{on}}}{r})) > 0", _uuid),
            # A GPU whose verdict asked an operator for a reset, a reboot or service within the window.
            "health": (f'max by (instance, uuid) (max_over_time({gpu.GPU_HEALTH_ACTION}{{{on}, '
                       f'action=~"reset_gpu|reboot|drain"}}{r})) == 1', _uuid),
            "ib_errors": (" or ".join(f"sum by (instance, device, port) (increase({name}{{{on}}}{r})) > 0"
                                      for name in IB_ERROR_COUNTERS), _port),
            "nvme_latency": (nvme_slow_query(on, r, f"{r} offset {self._window}s"), _device),
            "ib_degraded": (infiniband_degraded_query(on), _port),
        }
        found = []
        for signal, (query, device) in queries.items():
            found += [Hardware(signal=signal, instance=s.labels.get("instance", ""), device=device(s))
                      for s in self._client.vector(query, self._now)]
        return sorted(set(found), key=lambda h: (h.instance, h.signal, h.device))


def daemon_stacks(instance: str, job_id: str, timeout: float) -> dict[int, RankStack]:
    """What the daemon at `instance` (as Prometheus scrapes it, host:port, plain HTTP) serves on /api/v1/ranks for
    the job's ranks; empty when it cannot be read (another scheme, authentication, a firewall): said by the caller."""
    try:
        with urllib.request.urlopen(f"http://{instance}/api/v1/ranks", timeout=timeout) as answer:
            found = json.loads(answer.read(MAX_RANKS_BYTES + 1)[:MAX_RANKS_BYTES])["ranks"]
        return {int(r["rank"]): rank_stack(r) for r in found if r.get("job_id") == job_id}
    except Exception:  # whatever a node answers or fails with, the diagnosis goes on without its stacks
        return {}


def rank_stack(entry: dict[str, object]) -> RankStack:
    """One /api/v1/ranks entry: its stack and its groups."""
    stack, groups = entry.get("stack"), entry.get("groups")
    groups = groups if isinstance(groups, dict) else {}
    return RankStack(
        stack=tuple(str(f) for f in stack) if isinstance(stack, list) else None,
        group_ranks={str(g): str(v["ranks"]) for g, v in groups.items() if isinstance(v, dict) and v.get("ranks")},
        in_flight=tuple(str(g) for g, v in groups.items()
                        if isinstance(v, dict) and isinstance(v.get("issued"), int)
                        and isinstance(v.get("completed"), int) and v["issued"] > v["completed"]))


def nvme_latency(on: str, window: str) -> str:
    """Each NVMe namespace's mean request latency over `window` (a range, maybe with an offset)."""
    def summed(*metrics: Family) -> str:
        return "sum by (instance, device) (" + " + ".join(f"increase({m}{{{on}}}{window})" for m in metrics) + ")"

    return (f"({summed(nvme.NVME_READ_TIME_SECONDS_TOTAL, nvme.NVME_WRITE_TIME_SECONDS_TOTAL)}"
            f" / {summed(nvme.NVME_READS_COMPLETED_TOTAL, nvme.NVME_WRITES_COMPLETED_TOTAL)})")


def nvme_slow_query(on: str, window: str, before: str) -> str:
    """Namespaces slow against the window before, or against the fastest namespace of their model on the node
    (above a floor that fits NVMe), or slow outright."""
    now = nvme_latency(on, window)
    with_model = f"({now} * on (instance, device) group_left (model) max by (instance, device, model) " \
                 f"({nvme.NVME_INFO}{{{on}}}))"
    return (f"({now} > {NVME_LATENCY_FLOOR_SECONDS} and ({now} > {NVME_SLOW_FACTOR} * {nvme_latency(on, before)}"
            f" or max without (model) ({with_model} > on (instance, model) group_left {NVME_SLOW_FACTOR}"
            f" * min by (instance, model) ({with_model}))))"
            f" or {now} > {NVME_LATENCY_SECONDS}")


def infiniband_degraded_query(on: str) -> str:
    """Active ports below their own best rate of the last day, or below the node's fastest active port of the same
    link layer and board (TrainmonInfinibandLinkDegraded)."""
    rate = f"{infiniband.INFINIBAND_RATE_BYTES_PER_SECOND}{{{on}}}"
    role = (f"(({rate} and on (instance, device, port) {infiniband.INFINIBAND_STATE_ID}{{{on}}} == 4)"
            f" * on (instance, device, port) group_left (link_layer) max by (instance, device, port, link_layer)"
            f" ({infiniband.INFINIBAND_PORT_INFO}{{{on}}})"
            f" * on (instance, device) group_left (board_id) max by (instance, device, board_id)"
            f" ({infiniband.INFINIBAND_INFO}{{{on}}}))")
    return (f"{role} < on (instance, device, port) group_left max_over_time({rate}[1d])"
            f" or {role} < on (instance, link_layer, board_id) group_left"
            f" max by (instance, link_layer, board_id) ({role})")


def _mount_key(sample: Sample) -> tuple[str, str]:
    return sample.labels.get("instance", ""), sample.labels.get("mount", "")


def _uuid(sample: Sample) -> str:
    return sample.labels.get("uuid", "")


def _device(sample: Sample) -> str:
    return sample.labels.get("device", "")


def _port(sample: Sample) -> str:
    return f"{sample.labels.get('device', '')}/{sample.labels.get('port', '')}"
