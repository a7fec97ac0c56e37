"""The hook <-> daemon message, wire format v1 (SPEC §5): encode, decode, validate.

Standard library only: the training hook imports this module inside other people's images.

One JSON object per datagram, at most `MAX_DATAGRAM` bytes. Every value is cumulative since the
reporting process started (`pid`, `start_time`), so a lost datagram loses nothing and the daemon
needs no history. A `bye` carries the same fields as a report and says the process exits cleanly.

    {"v": 1, "type": "report" | "bye", "job_id": "llama-8b", "rank": 0, "pid": 4242,
     "start_time": 1767000000.0, "seq": 17, "sent_at": 1767000042.0,
     "info": {"local_rank": 0, "world_size": 8, "uuid": "GPU-...", "backend": "nccl",
              "framework": "ddp", "loss_scaler": "torch_amp"},
     "steps": 10, "samples": 320, "tokens": 655360,
     "step_hist": {"buckets": [cumulative count per bound of STEP_BUCKETS, then +Inf], "sum": 12.5},
     "last_step": 1767000041.5, "phase": "checkpoint",
     "comm_wait": 1.5, "data_wait": 0.2,
     "collectives": [["all_reduce", "default_pg", seconds, calls, bytes], ...],
     "group_sizes": {"default_pg": 8},
     "loss_scale": 65536.0, "skipped_steps": 1, "loss": 2.31, "grad_norm": 0.9, "nonfinite_losses": 0,
     "nccl_env": {"NCCL_ALGO": "Ring"}, "parallel": {"tp": 2, "dp": 4},
     "cuda": {"alloc_retries": 0, "ooms": 0}}

Only `v`, `type`, `job_id`, `rank`, `pid`, `start_time` and `seq` are required; a value that is
absent is unknown (and its series absent), and unknown fields are ignored so that a newer hook can
talk to an older daemon. Anything else raises `trainmon.errors.MessageRejected` with one of `REJECT_REASONS`
(`trainmon.errors` is standard library only too).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from trainmon.errors import MessageRejected

VERSION = 1
MAX_DATAGRAM = 16 * 1024
STEP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "send_recv", "barrier", "other")
LOSS_SCALERS = ("none", "torch_amp", "megatron", "deepspeed")
PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch")
KINDS = ("report", "bye")
MAX_GROUPS = 8  # distinct process-group labels per rank; the rest are folded into OTHER_GROUP
OTHER_GROUP = "other"
MAX_ENV = 32
MAX_TEXT = 128  # characters in any string value
MAX_ID = 1 << 31  # ranks, world sizes, pids
MAX_COUNT = 1 << 62
MAX_UNIX_TIME = 1e11  # a Unix time, not a year-5000 typo

REJECT_REASONS = ("oversized", "malformed", "version", "schema", "range")


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective:
    op: str
    group: str
    seconds: float
    calls: int
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """One decoded message: the identity of a rank's process and its cumulative values."""

    kind: str = "report"
    job_id: str
    rank: int
    pid: int
    start_time: float
    seq: int
    sent_at: float | None = None
    local_rank: int | None = None
    world_size: int | None = None
    uuid: str = ""
    backend: str = ""
    framework: str = ""
    loss_scaler: str = "none"
    steps: int = 0
    samples: int = 0
    tokens: int = 0
    step_buckets: tuple[int, ...] = (0,) * (len(STEP_BUCKETS) + 1)
    step_seconds_sum: float = 0.0
    last_step: float | None = None
    phase: str | None = None
    comm_wait: float = 0.0
    data_wait: float = 0.0
    collectives: tuple[Collective, ...] = ()
    group_sizes: Mapping[str, int] = field(default_factory=dict)
    loss_scale: float | None = None
    skipped_steps: int = 0
    loss: float | None = None
    grad_norm: float | None = None
    nonfinite_losses: int = 0
    nccl_env: Mapping[str, str] = field(default_factory=dict)
    parallel: Mapping[str, int] = field(default_factory=dict)
    cuda_alloc_retries: int | None = None
    cuda_ooms: int | None = None

    @property
    def incarnation(self) -> tuple[int, float]:
        """The reporting process: a new pid or start time is a restart, and counters begin again."""
        return (self.pid, self.start_time)


def encode(report: Report) -> bytes:
    """The datagram for `report`; optional values that are unknown are left out."""
    msg: dict[str, object] = {
        "v": VERSION, "type": report.kind, "job_id": report.job_id, "rank": report.rank,
        "pid": report.pid, "start_time": report.start_time, "seq": report.seq,
        "info": {"local_rank": report.local_rank, "world_size": report.world_size, "uuid": report.uuid,
                 "backend": report.backend, "framework": report.framework, "loss_scaler": report.loss_scaler},
        "steps": report.steps, "samples": report.samples, "tokens": report.tokens,
        "step_hist": {"buckets": list(report.step_buckets), "sum": report.step_seconds_sum},
        "comm_wait": report.comm_wait, "data_wait": report.data_wait,
        "collectives": [[c.op, c.group, c.seconds, c.calls, c.bytes] for c in report.collectives],
        "group_sizes": dict(report.group_sizes), "skipped_steps": report.skipped_steps,
        "nonfinite_losses": report.nonfinite_losses, "nccl_env": dict(report.nccl_env),
        "parallel": dict(report.parallel),
    }
    optional = {"sent_at": report.sent_at, "last_step": report.last_step, "phase": report.phase,
                "loss_scale": report.loss_scale, "loss": report.loss, "grad_norm": report.grad_norm}
    msg.update((k, v) for k, v in optional.items() if v is not None)
    if report.cuda_alloc_retries is not None or report.cuda_ooms is not None:
        msg["cuda"] = {"alloc_retries": report.cuda_alloc_retries, "ooms": report.cuda_ooms}
    return json.dumps(msg, separators=(",", ":")).encode()


def decode(data: bytes) -> Report:
    """Validate one datagram.

    Raises:
        MessageRejected: too large, not a JSON object, an unknown version, a missing or mistyped
            field, or a value out of range.
    """
    return validate(parse(data))


def parse(data: bytes) -> dict[str, object]:
    """The first half of `decode`: size and JSON only.

    Raises:
        MessageRejected: too large, or not a JSON object.
    """
    if len(data) > MAX_DATAGRAM:
        raise MessageRejected("oversized", f"{len(data)} bytes > {MAX_DATAGRAM}")
    try:
        msg = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MessageRejected("malformed", str(exc)[:80]) from None
    if not isinstance(msg, dict):
        raise MessageRejected("malformed", "not a JSON object")
    return msg


def validate(msg: Mapping[str, object]) -> Report:
    """The second half of `decode`: every field of a parsed message.

    Raises:
        MessageRejected: an unknown version, a missing or mistyped field, or a value out of range.
    """
    if msg.get("v") != VERSION or type(msg.get("v")) is not int:
        raise MessageRejected("version", repr(msg.get("v"))[:20])
    info = _mapping(msg, "info")
    hist = _mapping(msg, "step_hist")
    cuda = _mapping(msg, "cuda")
    kind = _text(msg, "type", required=True)
    if kind not in KINDS:
        raise MessageRejected("range", f"type {kind!r}")
    return Report(
        kind=kind,
        job_id=_job_id(msg),
        rank=_int(msg, "rank", required=True, hi=MAX_ID),
        pid=_int(msg, "pid", required=True, hi=MAX_ID),
        start_time=_time(msg, "start_time", required=True),
        seq=_count(msg, "seq", required=True),
        sent_at=_time(msg, "sent_at"),
        local_rank=_int(info, "local_rank", hi=MAX_ID),
        world_size=_int(info, "world_size", hi=MAX_ID),
        uuid=_text(info, "uuid") or "",
        backend=_text(info, "backend") or "",
        framework=_text(info, "framework") or "",
        loss_scaler=_choice(info, "loss_scaler", LOSS_SCALERS) or "none",
        steps=_count(msg, "steps") or 0,
        samples=_count(msg, "samples") or 0,
        tokens=_count(msg, "tokens") or 0,
        step_buckets=_buckets(hist),
        step_seconds_sum=_seconds(hist, "sum") or 0.0,
        last_step=_time(msg, "last_step"),
        phase=_text(msg, "phase"),
        comm_wait=_seconds(msg, "comm_wait") or 0.0,
        data_wait=_seconds(msg, "data_wait") or 0.0,
        collectives=_collectives(msg),
        group_sizes=_group_sizes(msg),
        loss_scale=_seconds(msg, "loss_scale"),
        skipped_steps=_count(msg, "skipped_steps") or 0,
        loss=_any_float(msg, "loss"),
        grad_norm=_any_float(msg, "grad_norm"),
        nonfinite_losses=_count(msg, "nonfinite_losses") or 0,
        nccl_env=_env(msg),
        parallel=_parallel(msg),
        cuda_alloc_retries=_count(cuda, "alloc_retries"),
        cuda_ooms=_count(cuda, "ooms"),
    )


def _get(obj: Mapping[str, object], key: str, types: tuple[type, ...], required: bool) -> object:
    return _typed(key, obj.get(key), types, required)


def _typed(key: str, value: object, types: tuple[type, ...], required: bool) -> object:
    if value is None:
        if required:
            raise MessageRejected("schema", f"{key} missing")
        return None
    # json.loads makes exact builtin types, so `type() in` is exact, and it refuses bool for int.
    if type(value) not in types:
        raise MessageRejected("schema", f"{key} is {type(value).__name__}")
    return value


def _mapping(obj: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = _get(obj, key, (dict,), False)
    return value if isinstance(value, dict) else {}


def _int(obj: Mapping[str, object], key: str, *, required: bool = False, hi: int) -> int | None:
    return _int_value(key, obj.get(key), required=required, hi=hi)


def _int_value(key: str, raw: object, *, required: bool = False, hi: int) -> int | None:
    value = _typed(key, raw, (int,), required)
    if value is not None and not 0 <= value < hi:  # type: ignore[operator]
        raise MessageRejected("range", f"{key}={value}")
    return value  # type: ignore[return-value]


def _count(obj: Mapping[str, object], key: str, *, required: bool = False) -> int | None:
    return _int(obj, key, required=required, hi=MAX_COUNT)


def _any_float(obj: Mapping[str, object], key: str) -> float | None:
    value = _get(obj, key, (int, float), False)
    return None if value is None else float(value)  # type: ignore[arg-type]


def _seconds(obj: Mapping[str, object], key: str, *, required: bool = False, hi: float = math.inf) -> float | None:
    return _seconds_value(key, obj.get(key), required=required, hi=hi)


def _seconds_value(key: str, raw: object, *, required: bool = False, hi: float = math.inf) -> float | None:
    value = _typed(key, raw, (int, float), required)
    if value is None:
        return None
    seconds = float(value)  # type: ignore[arg-type]
    if not (math.isfinite(seconds) and 0 <= seconds <= hi):
        raise MessageRejected("range", f"{key}={seconds}")
    return seconds


def _time(obj: Mapping[str, object], key: str, *, required: bool = False) -> float | None:
    return _seconds(obj, key, required=required, hi=MAX_UNIX_TIME)


def _text(obj: Mapping[str, object], key: str, *, required: bool = False) -> str | None:
    return _text_value(key, obj.get(key), required=required)


def _text_value(key: str, raw: object, *, required: bool = False) -> str | None:
    value = _typed(key, raw, (str,), required)
    if value is not None and (len(value) > MAX_TEXT or not value.isprintable()):  # type: ignore[arg-type]
        raise MessageRejected("range", f"{key} too long or not printable")
    return value  # type: ignore[return-value]


def _job_id(msg: Mapping[str, object]) -> str:
    value = _text(msg, "job_id", required=True)
    if not value:
        raise MessageRejected("range", "job_id empty")
    return value


def _choice(obj: Mapping[str, object], key: str, choices: tuple[str, ...]) -> str | None:
    return _choice_value(key, obj.get(key), choices)


def _choice_value(key: str, raw: object, choices: tuple[str, ...]) -> str | None:
    value = _text_value(key, raw)
    if value is not None and value not in choices:
        raise MessageRejected("range", f"{key}={value!r}")
    return value


def _buckets(hist: Mapping[str, object]) -> tuple[int, ...]:
    raw = _get(hist, "buckets", (list,), False)
    if raw is None:
        return (0,) * (len(STEP_BUCKETS) + 1)
    assert isinstance(raw, list)
    if len(raw) != len(STEP_BUCKETS) + 1:
        raise MessageRejected("schema", f"step_hist.buckets has {len(raw)} entries")
    # One pass over plain ints: this runs for every datagram (a dict and a call per bucket cost a
    # quarter of decoding).
    if not all(type(v) is int and 0 <= v < MAX_COUNT for v in raw):
        raise MessageRejected("schema", "step_hist.buckets holds something other than counts")
    counts = tuple(raw)
    if any(a > b for a, b in itertools.pairwise(counts)):
        raise MessageRejected("range", "step_hist.buckets not cumulative")
    return counts


def _collectives(msg: Mapping[str, object]) -> tuple[Collective, ...]:
    raw = _get(msg, "collectives", (list,), False) or []
    assert isinstance(raw, list)
    if len(raw) > len(OPS) * (MAX_GROUPS + 1):
        raise MessageRejected("range", f"{len(raw)} collective entries")
    out = []
    for entry in raw:  # the longest part of a report: checked value by value, without a dict per entry
        if not isinstance(entry, list) or len(entry) != 5:
            raise MessageRejected("schema", "collectives entry is not [op, group, seconds, calls, bytes]")
        op, group, seconds, calls, nbytes = entry
        out.append(Collective(
            op=_choice_value("op", op, OPS) or "other", group=_text_value("group", group, required=True) or "",
            seconds=_seconds_value("seconds", seconds) or 0.0, calls=_int_value("calls", calls, hi=MAX_COUNT) or 0,
            bytes=_int_value("bytes", nbytes, hi=MAX_COUNT) or 0))
    if len({c.group for c in out}) > MAX_GROUPS + 1:
        raise MessageRejected("range", "more than MAX_GROUPS distinct groups")
    return tuple(out)


def _group_sizes(msg: Mapping[str, object]) -> dict[str, int]:
    raw = _mapping(msg, "group_sizes")
    if len(raw) > MAX_GROUPS + 1:
        raise MessageRejected("range", f"{len(raw)} group sizes")
    if any(len(k) > MAX_TEXT or not k.isprintable() for k in raw):
        raise MessageRejected("range", "group name too long or not printable")
    return {k: _int(raw, k, required=True, hi=MAX_ID) or 0 for k in raw}


def _env(msg: Mapping[str, object]) -> dict[str, str]:
    raw = _mapping(msg, "nccl_env")
    if len(raw) > MAX_ENV:
        raise MessageRejected("range", f"{len(raw)} nccl_env entries")
    env = {k: _text(raw, k, required=True) or "" for k in raw}
    if any(not k.startswith(("NCCL_", "TORCH_NCCL_")) or len(k) > MAX_TEXT for k in env):
        raise MessageRejected("range", "nccl_env name is not NCCL_* or TORCH_NCCL_*")
    return env


def _parallel(msg: Mapping[str, object]) -> dict[str, int]:
    raw = _mapping(msg, "parallel")
    if any(k not in PARALLEL_KEYS for k in raw):
        raise MessageRejected("range", "unknown parallel key")
    return {k: _int(raw, k, required=True, hi=MAX_ID) or 0 for k in raw}
