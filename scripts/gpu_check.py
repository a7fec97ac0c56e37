"""Check the hook and the GPU collector against what one real GPU says; one JSON summary.

    bash scripts/gpu_check.sh                      # from the repository root; at most 8 minutes on one H100
    PYTHONPATH=exporter python scripts/gpu_check.py [--only CHECK ...] [--out FILE]

It needs only what a GPU machine's image has: PyTorch with CUDA and NCCL, nvidia-ml-py, prometheus-client and
psutil (no network, nothing installed). NCCL runs with world size 1 on one GPU (two ranks on one GPU are refused
by NCCL), so nothing here waits for a peer. Each check runs in its own process under its own time limit, so a
crash, a hang or a broken CUDA context loses that check alone. The summary goes to $OUT/gpu_check.json when OUT
is set, else ./gpu_check.json, and to stdout. The hook is used through its public API only (`TrainingMonitor`
with a transport that decodes what it sends), so the check does not depend on the hook's internals.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 470.0  # the whole run, checks and start-up included, stays under 8 minutes
REPORT_INTERVAL_S = "0.05"  # the hook reports 20 times a second: races with captures and syncs show up
OPTIONAL_MODULES = ("pynvml", "prometheus_client", "psutil", "fastapi", "uvicorn", "httpx", "pytest")
Result = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Check:
    run: Callable[[], Result]
    limit_s: float
    env: Mapping[str, str] = field(default_factory=dict)
    doc: str = ""


# --- what the hook sends: decoded from its own datagrams ------------------------------------------------------


class Capture:
    """A transport for TrainingMonitor that decodes every datagram (trainmon.wire) and keeps it with its time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.received: list[tuple[float, Any]] = []

    def send(self, payload: bytes) -> None:
        from trainmon import wire

        report = wire.decode(payload)
        with self._lock:
            self.received.append((time.monotonic(), report))

    def close(self) -> None:
        pass

    def count(self) -> int:
        with self._lock:
            return len(self.received)

    def latest(self) -> Any:
        with self._lock:
            return self.received[-1][1] if self.received else None

    def after(self, count: int, timeout: float = 5.0) -> Any:
        """The first report at least `count` datagrams after now; the latest one if none comes in time."""
        target = self.count() + count
        deadline = time.monotonic() + timeout
        while self.count() < target and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.latest()

    def gaps_between(self, start: float, end: float) -> float:
        """The longest time without a datagram inside [start, end]."""
        with self._lock:
            times = [start, *(t for t, _ in self.received if start <= t <= end), end]
        return max(b - a for a, b in itertools.pairwise(times))


def monitor(capture: Capture) -> Any:
    from trainmon.torch import TrainingMonitor

    mon = TrainingMonitor(job_id="gpu-check", transport=capture, env={"TRAINMON_REPORT_INTERVAL": REPORT_INTERVAL_S})
    mon.step_begin()  # the hook starts reporting with the first step
    mon.step_end()
    return mon


def totals(report: Any) -> Result:
    """What a report says about communication, in one flat dict."""
    if report is None:
        return {"collectives": {}, "comm_wait_s": 0.0, "hook_errors": {}}
    return {"collectives": {f"{c.op}|{c.group}": [c.seconds, c.calls] for c in report.collectives},
            "comm_wait_s": report.comm_wait, "hook_errors": dict(report.hook_errors)}


def delta(before: Result, after: Result) -> Result:
    out: Result = {"comm_wait_s": after["comm_wait_s"] - before["comm_wait_s"]}
    for key, (seconds, calls) in after["collectives"].items():
        old_seconds, old_calls = before["collectives"].get(key, [0.0, 0])
        if calls != old_calls:
            out[key] = {"seconds": seconds - old_seconds, "calls": calls - old_calls}
    if after["hook_errors"] != before["hook_errors"]:
        out["hook_errors"] = after["hook_errors"]
    return out


def settle(mon: Any, capture: Capture) -> Result:
    """Totals once the GPU is idle, a step boundary has passed and two more reports went out."""
    import torch

    torch.cuda.synchronize()
    mon.step_begin()
    mon.step_end()
    return totals(capture.after(2))


def guarded(result: Result, key: str, run: Callable[[], Any]) -> None:
    """One part of a check: its value, or its error, under `key`; the others go on."""
    try:
        result[key] = run()
    except Exception as exc:  # a device check records every failure and goes on
        result[key] = {"error": repr(exc)[:500], "trace": traceback.format_exc()[-1500:]}


# --- CUDA helpers -------------------------------------------------------------------------------------------------


def sleep_cycles(ms: float) -> int:
    """`torch.cuda._sleep` cycles for about `ms` milliseconds on this GPU."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    end.synchronize()
    return int(50_000_000 * ms / start.elapsed_time(end))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def nccl_world_of_one() -> Iterator[Any]:
    """torch.distributed with NCCL, rank 0 of 1, on GPU 0."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            device_id=torch.device("cuda:0"))
    try:
        yield dist
    finally:
        dist.destroy_process_group()


def kernels(prof: Any) -> list[Result]:
    """Device-side events of a torch.profiler run: name, stream, duration."""
    found = []
    for event in prof.events():
        if getattr(event.device_type, "name", "") != "CUDA":
            continue
        found.append({"name": event.name[:80], "stream": getattr(event, "device_resource_id", None),
                      "us": float(event.time_range.elapsed_us())})
    return found


def nccl_kernel_us(prof: Any) -> Result:
    found = [k for k in kernels(prof) if "nccl" in k["name"].lower() or "memcpy" in k["name"].lower()]
    return {"kernels": found[:20], "total_us": sum(k["us"] for k in found)}


# --- checks (each runs in its own process) --------------------------------------------------------------------


def check_env() -> Result:
    import torch

    result: Result = {"torch": torch.__version__, "cuda": torch.version.cuda, "euid": os.geteuid(),
                      "python": sys.version.split()[0],
                      "importable": {m: importlib.util.find_spec(m) is not None for m in OPTIONAL_MODULES}}
    guarded(result, "gpu", lambda: torch.cuda.get_device_name(0))
    guarded(result, "nccl", lambda: ".".join(map(str, torch.cuda.nccl.version())))
    result["work_get_duration"] = hasattr(torch.distributed.Work, "_get_duration")
    result["enable_collectives_timing"] = hasattr(torch.distributed.ProcessGroup, "_enable_collectives_timing")
    return result


def check_pytest_gpu() -> Result:
    """The `gpu`-marked tests, where pytest is importable (the GPU image may lack it and the test extra)."""
    if importlib.util.find_spec("pytest") is None:
        return {"not_run": "pytest is not importable here (the test extra is not installed)"}
    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                   if "pytest.mark.gpu" in p.read_text(errors="replace"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *files],
                          cwd=REPO, capture_output=True, text=True, timeout=CHECKS["pytest_gpu"].limit_s - 10)
    return {"files": files, "returncode": done.returncode, "tail": (done.stdout + done.stderr)[-3000:]}


def check_nccl_timing() -> Result:
    """nccl_time and comm_wait against Work._get_duration() and the profiler's NCCL kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    result: Result = {}
    with nccl_world_of_one() as dist:
        group = dist.distributed_c10d._get_default_group()
        guarded(result, "enable_collectives_timing", lambda: (group._enable_collectives_timing(), "on")[1])
        capture = Capture()
        mon = monitor(capture)
        x = torch.ones(64 << 20, device="cuda")  # 256 MiB
        out = torch.empty_like(x)
        for _ in range(3):
            dist.all_reduce(x)
            dist.all_gather_into_tensor(out, x)
        torch.cuda.synchronize()
        cycles = sleep_cycles(200)

        def blocking() -> Result:
            before = settle(mon, capture)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                returned = dist.all_gather_into_tensor(out, x)
                torch.cuda.synchronize()
            return {"returned": repr(returned), "trainmon": delta(before, settle(mon, capture)),
                    "profiler": nccl_kernel_us(prof)}

        def async_200ms_before_wait() -> Result:
            before = settle(mon, capture)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                work = dist.all_gather_into_tensor(out, x, async_op=True)
                torch.cuda._sleep(cycles)  # compute queued between issue and wait (DDP, Megatron overlap)
                work.wait()
                torch.cuda.synchronize()
            duration: Any
            try:
                duration = work._get_duration()
            except Exception as exc:  # the backend may not time it
                duration = repr(exc)[:200]
            return {"trainmon": delta(before, settle(mon, capture)), "work_get_duration_ms": duration,
                    "profiler": nccl_kernel_us(prof), "truth": "the collective's own time, not the 200 ms between"}

        def async_done_before_wait() -> Result:
            before = settle(mon, capture)
            work = dist.all_gather_into_tensor(out, x, async_op=True)
            torch.cuda.synchronize()  # the GPU is done; nobody has waited yet
            seen = delta(before, totals(capture.after(3)))
            work.wait()
            return {"before_wait": seen, "after_wait": delta(before, settle(mon, capture)),
                    "truth": "never a 0 s collective"}

        def side_stream() -> Result:
            before = settle(mon, capture)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # FSDP2 issues its all-gathers and reduce-scatters like this
                torch.cuda._sleep(cycles)
                dist.all_reduce(x)
            return {"trainmon": delta(before, settle(mon, capture)),
                    "truth": "comm_wait 0: the compute stream never waited"}

        for name, part in (("blocking", blocking), ("async_200ms_before_wait", async_200ms_before_wait),
                           ("async_done_before_wait", async_done_before_wait), ("side_stream", side_stream)):
            guarded(result, name, part)
        mon.close()
    return result


def check_graph_capture() -> Result:
    """Captures in one mode (GPU_CHECK_CAPTURE_MODE; a process each, as a failed capture can leave the context
    unusable) while the hook reports 20 times a second."""
    import torch

    mode = os.environ["GPU_CHECK_CAPTURE_MODE"]
    result: Result = {"capture_error_mode": mode}
    with nccl_world_of_one() as dist:
        capture = Capture()
        mon = monitor(capture)
        x = torch.ones(1 << 20, device="cuda")
        a = torch.randn(1024, 1024, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside any capture, as torch.cuda.graph asks
            for _ in range(3):
                dist.all_reduce(x)
                a @ a
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

        def captures() -> Result:
            ok, errors, graphs = 0, set(), []
            for _ in range(20):
                graph = torch.cuda.CUDAGraph()
                try:
                    with torch.cuda.graph(graph, capture_error_mode=mode):
                        b = a
                        for _ in range(50):
                            b = b @ a
                        dist.all_reduce(x)
                    graphs.append(graph)
                    ok += 1
                except Exception as exc:  # an invalidated capture is the finding
                    errors.add(repr(exc)[:200])
                    torch.cuda.synchronize()
            for graph in graphs:
                graph.replay()
            torch.cuda.synchronize()
            sent = capture.count()
            time.sleep(1.0)
            return {"captured": ok, "failed": 20 - ok, "errors": sorted(errors),
                    "reports_in_the_second_after": capture.count() - sent,
                    "hook_errors": totals(capture.latest())["hook_errors"]}

        guarded(result, "captures", captures)
        mon.close()
    return result


def check_query_block() -> Result:
    """The heartbeat, event.query() and memory_stats() while the training thread synchronises on a 3 s kernel."""
    import torch

    torch.cuda.set_device(0)
    capture = Capture()
    mon = monitor(capture)
    event = torch.cuda.Event(enable_timing=True)
    cycles = sleep_cycles(3000)
    result: Result = {}

    def synchronise(how: str) -> Result:
        worst = {"query_s": 0.0, "memory_stats_s": 0.0}
        stop = threading.Event()

        def probe() -> None:
            while not stop.is_set():
                started = time.perf_counter()
                event.query()
                worst["query_s"] = max(worst["query_s"], time.perf_counter() - started)
                started = time.perf_counter()
                torch.cuda.memory_stats(0)
                worst["memory_stats_s"] = max(worst["memory_stats_s"], time.perf_counter() - started)
                time.sleep(0.005)

        mon.step_begin()
        event.record()
        torch.cuda._sleep(cycles)
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        time.sleep(0.2)
        started = time.monotonic()
        (torch.cuda.synchronize if how == "device" else torch.cuda.current_stream().synchronize)()
        ended = time.monotonic()
        stop.set()
        prober.join()
        mon.step_end()
        return {"sync_s": ended - started, **worst, "longest_heartbeat_gap_s": capture.gaps_between(started, ended),
                "report_interval_s": float(REPORT_INTERVAL_S)}

    for how in ("device", "stream"):
        guarded(result, f"{how}_synchronize", lambda how=how: synchronise(how))  # type: ignore[misc]
    mon.close()
    return result


def check_overlap() -> Result:
    """Two 100 ms kernels on two streams: plain, with timing and plain events, and with the hook around a
    collective on the second stream (overlapped: about 0.1 s; serialised: about 0.2 s)."""
    import torch

    result: Result = {"CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")}
    with nccl_world_of_one() as dist:
        cycles = sleep_cycles(100)
        compute, comm = torch.cuda.Stream(), torch.cuda.Stream()
        x = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(x)

        def once(events: str) -> float:
            torch.cuda.synchronize()
            started = time.perf_counter()
            with torch.cuda.stream(compute):
                if events in ("timing", "plain"):
                    torch.cuda.Event(enable_timing=events == "timing").record()
                torch.cuda._sleep(cycles)
                if events in ("timing", "plain"):
                    torch.cuda.Event(enable_timing=events == "timing").record()
            with torch.cuda.stream(comm):
                torch.cuda._sleep(cycles)
                if events == "collective":
                    dist.all_reduce(x)
            torch.cuda.synchronize()
            return time.perf_counter() - started

        def median_of_five(events: str) -> float:
            once(events)
            return sorted(once(events) for _ in range(5))[2]

        for events in ("none", "timing", "plain", "collective"):
            guarded(result, f"wall_s_{events}", lambda events=events: median_of_five(events))  # type: ignore[misc]
        capture = Capture()
        mon = monitor(capture)
        guarded(result, "wall_s_collective_with_hook", lambda: median_of_five("collective"))
        mon.close()
    return result


def check_nvml() -> Result:
    """The project's GPU collector on the real driver under load: cost per cycle, what it skipped, and every
    field of its one batched call that did not answer SUCCESS."""
    import pynvml
    import torch

    from trainmon.collectors.base import NodeResources
    from trainmon.collectors.gpu import GpuCollector
    from trainmon.nvml import fields
    from trainmon.nvml.device import Gpu, identify
    from trainmon.settings import Settings

    result: Result = {}
    stop = threading.Event()

    def load() -> None:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        host = torch.empty(1 << 28, dtype=torch.uint8, pin_memory=True)
        device = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
        while not stop.is_set():
            for _ in range(20):
                a = (a @ a).clamp_(-1, 1)
            device.copy_(host, non_blocking=True)  # PCIe traffic for the PCIe byte counters
            torch.cuda.synchronize()

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    collector = GpuCollector(Settings(interval=1.0, collectors=("gpu",), state_dir=None), NodeResources())
    cycles = []
    try:
        for _ in range(4):
            time.sleep(1.1)
            started = time.perf_counter()
            try:
                collection = collector.collect()
            except Exception as exc:  # a failing cycle is a finding
                cycles.append({"seconds": time.perf_counter() - started, "error": repr(exc)[:500]})
                continue
            cycles.append({"seconds": time.perf_counter() - started, "skipped": list(collection.skipped),
                           "samples": sum(len(f.samples) for f in collection.families)})
            result.setdefault("found", list(collection.found))
        result["collector_cycles"] = cycles
        pynvml.nvmlInit()
        handle, identity = identify(0)
        gpu = Gpu(identity, retry_s=1.0)
        gpu.attach(handle, identity, time.monotonic())
        request = gpu.field_request
        codes = fields.return_codes(pynvml.nvmlDeviceGetFieldValues(handle, request))
        result["fields"] = {"requested": len(request),
                            "not_success": {f"{i}@{s}": code for (i, s), code in codes.items() if code}}
        for name, call in (("temperature_v", lambda: pynvml.nvmlDeviceGetTemperatureV(handle, 0)),
                           ("temperature", lambda: pynvml.nvmlDeviceGetTemperature(handle, 0)),
                           ("mig_mode", lambda: pynvml.nvmlDeviceGetMigMode(handle)),
                           ("gpm_supported", lambda: pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice),
                           ("driver", pynvml.nvmlSystemGetDriverVersion)):
            guarded(result, name, call)
        gpu.detach()
        pynvml.nvmlShutdown()
    finally:
        stop.set()
        loader.join()
        collector.close()
    return result


CHECKS: dict[str, Check] = {
    "env": Check(check_env, 30, doc="versions, the GPU, what is importable"),
    "pytest_gpu": Check(check_pytest_gpu, 100, doc="the gpu-marked tests, where pytest is importable"),
    "nccl_timing": Check(check_nccl_timing, 70, doc="nccl_time/comm_wait vs Work._get_duration and the profiler"),
    "graph_capture_global": Check(check_graph_capture, 45, {"GPU_CHECK_CAPTURE_MODE": "global"},
                                  doc="CUDA graph captures in global mode (torch's default) while the hook reports"),
    "graph_capture_thread_local": Check(check_graph_capture, 45, {"GPU_CHECK_CAPTURE_MODE": "thread_local"},
                                        doc="the same in thread-local mode (torch.compile's)"),
    "query_block": Check(check_query_block, 40, doc="heartbeat and query/memory_stats latency during a sync"),
    "overlap_connections_1": Check(check_overlap, 40, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
                                   doc="two-stream overlap, with and without events, one connection"),
    "overlap_connections_default": Check(check_overlap, 40, doc="the same with the default connections"),
    "nvml": Check(check_nvml, 60, doc="the GPU collector on the real driver under load"),
}


# --- the runner ------------------------------------------------------------------------------------------------


def refusal() -> str | None:
    """Why this machine cannot run the checks, or None."""
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not importable ({exc}): the GPU check needs PyTorch with CUDA and NCCL"
    if not torch.cuda.is_available():
        return f"no CUDA device: torch {torch.__version__} says torch.cuda.is_available() is False"
    if not torch.distributed.is_nccl_available():
        return f"torch {torch.__version__} has no NCCL"
    return None


def run_one(name: str, result_path: Path) -> int:
    """In the child process: one check, its result written as JSON."""
    try:
        body: Result = {"result": CHECKS[name].run()}
    except Exception as exc:  # the parent records it beside the other checks
        body = {"error": repr(exc)[:500], "trace": traceback.format_exc()[-2000:]}
    result_path.write_text(json.dumps(body, default=str))
    return 0


def run_child(name: str, check: Check, limit: float) -> Result:
    env = {**os.environ, **check.env, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO / "exporter"), os.environ.get("PYTHONPATH", "")]))}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        result_path = Path(scratch) / "result.json"
        try:
            done = subprocess.run([sys.executable, __file__, "--run-one", name, "--result", str(result_path)],
                                  env=env, cwd=REPO, capture_output=True, text=True, timeout=limit)
            outcome: Result = {"returncode": done.returncode}
            log = done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            outcome = {"error": f"time limit of {limit:.0f}s passed"}
            log = "".join(part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
                          for part in (exc.stdout, exc.stderr))
        if result_path.exists():
            outcome.update(json.loads(result_path.read_text()))
        elif "error" not in outcome:
            outcome["error"] = "the check's process ended without a result (a crash)"
    outcome["seconds"] = round(time.monotonic() - started, 2)
    if "error" in outcome:
        outcome["log_tail"] = log[-2000:]
    return outcome


def output_path(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    return Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else Path("gpu_check.json")


def write_summary(summary: Result, path: Path) -> None:
    text = json.dumps(summary, indent=1, default=str)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    print(text)
    print(f"written to {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="checks: " + "; ".join(f"{name} ({c.doc}, {c.limit_s:.0f}s)" for name, c in CHECKS.items()))
    parser.add_argument("--only", nargs="+", choices=sorted(CHECKS), help="run these checks only")
    parser.add_argument("--out", type=Path, help="the summary file (default: $OUT/gpu_check.json or ./gpu_check.json)")
    parser.add_argument("--run-one", choices=sorted(CHECKS), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:
        return run_one(args.run_one, args.result)
    path = output_path(args.out)
    why = refusal()
    if why is not None:
        print(f"gpu_check: refused: {why}", file=sys.stderr)
        write_summary({"refused": why}, path)
        return 2
    started = time.monotonic()
    checks: Result = {}
    for name in args.only or CHECKS:
        left = BUDGET_S - (time.monotonic() - started)
        if left < 10:
            checks[name] = {"error": f"not run: the {BUDGET_S:.0f}s budget is spent"}
            continue
        print(f"gpu_check: {name} (at most {min(CHECKS[name].limit_s, left):.0f}s)", file=sys.stderr)
        checks[name] = run_child(name, CHECKS[name], min(CHECKS[name].limit_s, left))
    failed = sorted(name for name, outcome in checks.items() if "error" in outcome)
    write_summary({"seconds": round(time.monotonic() - started, 1), "failed": failed, "checks": checks}, path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
