"""The hook <-> daemon message, wire format v1 (SPEC §5): one schema table drives encode and validate.

Standard library only: the training hook imports this module inside other people's images.

One JSON object per datagram, at most `MAX_DATAGRAM` bytes. Every value is cumulative since the
reporting process started (`pid`, `start_time`), so a lost datagram loses nothing and the daemon
needs no history. A `bye` carries the same fields as a report and says the process exits
(`exit_reason` "clean" or "error").

    {"v": 1, "type": "report" | "bye", "job_id": "llama-8b", "rank": 0, "pid": 4242,
     "start_time": 1767000000.0, "seq": 17, "sent_at": 1767000042.0,
     "info": {"local_rank": 0, "world_size": 8, "uuid": "GPU-...", "backend": "nccl",
              "framework": "ddp", "loss_scaler": "torch_amp", "pod": "", "namespace": "",
              "pipeline_stage": 1},
     "steps": 10, "samples": 320, "tokens": 655360, "microbatches": 40,
     "step_hist": {"buckets": [cumulative count per bound of STEP_BUCKETS, then +Inf], "sum": 12.5},
     "last_step": 1767000041.5, "first_step": 1767000001.0, "phase": "checkpoint",
     "comm_wait": 1.5, "data_wait": 0.2, "model_flops": 1.2e15,
     "collectives": [["all_reduce", "default_pg", seconds, calls, bytes], ...],
     "collectives_untimed": [["all_reduce", "default_pg", calls], ...],
     "groups": [["default_pg", issued, completed], ...], "inflight": [["default_pg", "all_reduce", since], ...],
     "inflight_age": {"default_pg": 12.5}, "pg_timeouts": {"default_pg": 600.0}, "collectives_captured": 0,
     "group_sizes": {"default_pg": 8}, "phase_seconds": {"checkpoint": 12.0}, "hook_errors": {"send_drops": 3},
     "loss_scale": 65536.0, "skipped_steps": 1, "loss": 2.31, "grad_norm": 0.9, "nonfinite_losses": 0,
     "loss_max": 2.4, "grad_norm_max": 1.1, "loss_spikes": 0, "grad_norm_spikes": 0,
     "nccl_env": {"NCCL_ALGO": "Ring"}, "parallel": {"tp": 2, "dp": 4},
     "cuda": {"alloc_retries": 0, "ooms": 0}, "job_gauges": {"rl_reward_mean": 0.62},
     "hang_suspected": 1, "stack": ["train.py:88:all_reduce", ...], "group_ranks": {"default_pg": "0-7"}}

`stack` (the training thread's stack, innermost frame first, each `file:line:function`, sent in one
report per hang episode) is the one field that never becomes a label: the daemon serves it as JSON.

A framework's driver process that is no rank (verl's trainer) reports as rank `DRIVER_RANK`: job-level
phase times and the `job_gauges` the framework itself computes; the daemon serves only those for it,
under `rank="driver"`. A daemon older than that rejects such reports (`range`) and serves the ranks as before.

An in-flight collective's age is `inflight_age`, measured on the hook's monotonic clock when it made the
report; the daemon adds its own monotonic time since it received the report, so a step of either node's
wall clock moves no age. `since` (Unix time) stays for daemons older than `inflight_age`, and a hook
older than it is aged wall minus wall.

`FIELDS` is the whole schema: each row names the wire key, the `Report` attribute and its `Kind`,
which both checks a received value and writes a sent one, so a new field is one row (and one
`Report` attribute) and gets the same checks as every other: numbers finite and in range (an
integer of any size is rejected, never converted), strings printable (no control characters, no
surrogates) and short, lists and maps bounded and their entries unique by the labels they become.

Only `v`, `type`, `job_id`, `rank`, `pid`, `start_time` and `seq` are required; a value that is
absent (or null) is unknown (and its series absent), and unknown fields are ignored so that a newer
hook can talk to an older daemon. Anything else raises `trainmon.errors.MessageRejected` with one of
`REJECT_REASONS` (`trainmon.errors` is standard library only too).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from trainmon.errors import MessageRejected

VERSION = 1
# Where the daemon binds its ingest socket and the hook sends by default; deploy/ spells it too (tests/deploy).
DEFAULT_SOCKET = "/run/trainmon/ingest.sock"
# The hook's variables naming the daemon's --ingest-socket and --ingest-udp (the same TRAINMON_* as the flags').
SOCKET_ENV, UDP_ENV = "TRAINMON_INGEST_SOCKET", "TRAINMON_INGEST_UDP"
MAX_DATAGRAM = 16 * 1024
STEP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "send_recv", "barrier", "other")
LOSS_SCALERS = ("none", "torch_amp", "megatron", "deepspeed")
PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch")
KINDS = ("report", "bye")
EXIT_REASONS = ("clean", "error")
MAX_GROUPS = 8  # distinct process-group labels per rank; the rest are folded into OTHER_GROUP
OTHER_GROUP = "other"
MAX_PHASES = 16  # distinct phase names in phase_seconds; the rest are folded into OTHER_PHASE
OTHER_PHASE = "other"
MAX_HOOK_ERROR_KINDS = 8
DRIVER_RANK = -1  # the rank of a report from a framework's driver process (job-level values only)
# Values a framework reports about the whole job, each served as `trainmon_<key>` (the training collector
# lists the keys it serves; one it does not know, from a newer hook, is accepted and not served).
MAX_JOB_GAUGES = 16
MAX_ENV = 32
NCCL_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_")  # the variables a rank reports in nccl_env
MAX_TEXT = 128  # characters in any string value
MAX_ID = 1 << 31  # ranks, world sizes, pids
MAX_COUNT = 1 << 62
MAX_SEQ = 1 << 40  # a report a millisecond for 34 years
MAX_UNIX_TIME = 1e11  # a Unix time, not a year-5000 typo
MAX_AMOUNT = 1e300  # seconds, FLOPs, loss scales: finite and far from overflowing a sum
# A stuck thread's stack (`stack`, innermost frame first, each "file:line:function"): served as JSON, never as labels.
MAX_FRAMES = 64
MAX_FRAME_TEXT = 256
MAX_STACK_BYTES = 4096

REJECT_REASONS = ("oversized", "malformed", "version", "schema", "range", "stale", "identity", "max_ranks",
                  "series_budget")


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective:
    op: str
    group: str
    seconds: float
    calls: int
    bytes: int


@dataclass(frozen=True, slots=True)
class UntimedCalls:
    """Calls of one op on one group counted without a time of their own (`Collective.seconds` leaves them out)."""

    op: str
    group: str
    calls: int


@dataclass(frozen=True, slots=True)
class GroupSeq:
    """Collectives this rank has issued on, and completed on, one process group."""

    group: str
    issued: int
    completed: int


@dataclass(frozen=True, slots=True)
class Inflight:
    """The oldest issued-but-not-completed collective of one group; `since` is when it was issued (Unix time)."""

    group: str
    op: str
    since: float


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
    exit_reason: str = "clean"
    local_rank: int | None = None
    world_size: int | None = None
    uuid: str = ""
    backend: str = ""
    framework: str = ""
    loss_scaler: str = "none"
    pod: str = ""
    namespace: str = ""
    steps: int = 0
    samples: int = 0
    tokens: int = 0
    microbatches: int | None = None  # None: the loop does not say (its series is absent)
    pipeline_stage: int | None = None
    step_buckets: tuple[int, ...] = (0,) * (len(STEP_BUCKETS) + 1)
    step_seconds_sum: float = 0.0
    last_step: float | None = None
    first_step: float | None = None
    phase: str | None = None
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    comm_wait: float = 0.0
    data_wait: float = 0.0
    model_flops: float | None = None
    collectives: tuple[Collective, ...] = ()
    collectives_untimed: tuple[UntimedCalls, ...] = ()
    group_seqs: tuple[GroupSeq, ...] = ()
    inflight: tuple[Inflight, ...] = ()
    inflight_age: Mapping[str, float] = field(default_factory=dict)  # group -> seconds, as the report was made
    pg_timeouts: Mapping[str, float] = field(default_factory=dict)  # group -> its backend's timeout, seconds
    collectives_captured: int = 0  # CUDA collectives issued while a graph was captured (unseen when replayed)
    group_sizes: Mapping[str, int] = field(default_factory=dict)
    loss_scale: float | None = None
    skipped_steps: int = 0
    loss: float | None = None
    grad_norm: float | None = None
    nonfinite_losses: int = 0
    loss_max: float | None = None
    grad_norm_max: float | None = None
    loss_spikes: int = 0
    grad_norm_spikes: int = 0
    nccl_env: Mapping[str, str] = field(default_factory=dict)
    parallel: Mapping[str, int] = field(default_factory=dict)
    cuda_alloc_retries: int | None = None
    cuda_ooms: int | None = None
    hook_errors: Mapping[str, int] = field(default_factory=dict)
    job_gauges: Mapping[str, float] = field(default_factory=dict)
    hang_suspected: int = 0  # 1 while the rank's collective or step is past its hang threshold
    stack: tuple[str, ...] | None = None  # the training thread's stack, once per hang episode
    group_ranks: Mapping[str, str] = field(default_factory=dict)  # group -> its global ranks ("0-3", "0-56:8")

    @property
    def incarnation(self) -> tuple[int, float]:
        """The reporting process: a new pid or start time is a restart, and counters begin again."""
        return (self.pid, self.start_time)


# The Python value of one kind of field: what `decode` makes and `encode` and `decreased` take.
V = TypeVar("V")


class Kind(Protocol[V]):
    """How one field is checked on the way in and written on the way out."""

    def decode(self, name: str, raw: object) -> V:
        """The value for `Report`, or MessageRejected."""
        ...

    def encode(self, value: V) -> object:
        """The JSON value for the datagram."""
        ...

    def decreased(self, new: V, old: V) -> bool:
        """Whether a cumulative value went backwards (only asked of fields marked cumulative)."""
        ...


@dataclass(frozen=True, slots=True)
class Int:
    """An integer in [lo, hi); bool is not an integer here."""

    hi: int
    lo: int = 0

    def decode(self, name: str, raw: object) -> int:
        if type(raw) is not int:  # json.loads makes exact builtin types
            raise MessageRejected("schema", f"{name} is {type(raw).__name__}")
        if not self.lo <= raw < self.hi:
            raise MessageRejected("range", f"{name} out of range")
        return raw

    def encode(self, value: int) -> object:
        return value

    def decreased(self, new: int, old: int) -> bool:
        return new < old


@dataclass(frozen=True, slots=True)
class Number:
    """A float in [lo, hi]; an int of any size is converted only if it fits. `nan_ok` lets NaN and ±inf through."""

    lo: float = 0.0
    hi: float = MAX_AMOUNT
    nan_ok: bool = False

    def decode(self, name: str, raw: object) -> float:
        if type(raw) is not int and type(raw) is not float:
            raise MessageRejected("schema", f"{name} is {type(raw).__name__}")
        try:
            value = float(raw)
        except OverflowError:  # a 400-digit integer
            raise MessageRejected("range", f"{name} does not fit a float") from None
        if self.nan_ok and not math.isfinite(value):
            return value
        if not (math.isfinite(value) and self.lo <= value <= self.hi):
            raise MessageRejected("range", f"{name}={value}")
        return value

    def encode(self, value: float) -> object:
        return value

    def decreased(self, new: float, old: float) -> bool:
        return new < old


@dataclass(frozen=True, slots=True)
class Text:
    """A string that may become a label value: printable, no surrogates, at most MAX_TEXT characters.

    `choices` restricts it to a set; `prefixes` to names starting with one of them; `identifier` to
    a short ASCII identifier.
    """

    choices: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    identifier: bool = False
    nonempty: bool = False

    def decode(self, name: str, raw: object) -> str:
        if type(raw) is not str:
            raise MessageRejected("schema", f"{name} is {type(raw).__name__}")
        if raw in self.choices:  # the common case of a choice field, and every choice is printable
            return raw
        # isprintable() is False for control characters (Cc), format characters, surrogates (Cs),
        # unassigned code points and every separator but the space (U+2028 included).
        if len(raw) > MAX_TEXT or not raw.isprintable():
            raise MessageRejected("range", f"{name} too long or not printable")
        if self.nonempty and not raw:
            raise MessageRejected("range", f"{name} empty")
        if self.choices and raw not in self.choices:
            raise MessageRejected("range", f"{name}={raw!r}")
        if self.prefixes and not raw.startswith(self.prefixes):
            raise MessageRejected("range", f"{name} does not start with {'/'.join(self.prefixes)}")
        if self.identifier and not (raw.isascii() and raw.isidentifier()):
            raise MessageRejected("range", f"{name} is not an identifier")
        return raw

    def encode(self, value: str) -> object:
        return value

    def decreased(self, new: str, old: str) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class Frames:
    """A stack: at most MAX_FRAMES printable strings of at most MAX_FRAME_TEXT characters, MAX_STACK_BYTES in all."""

    def decode(self, name: str, raw: object) -> tuple[str, ...]:
        if type(raw) is not list or not all(type(frame) is str for frame in raw):
            raise MessageRejected("schema", f"{name} is not a list of strings")
        if len(raw) > MAX_FRAMES or not all(len(f) <= MAX_FRAME_TEXT and f.isprintable() for f in raw):
            raise MessageRejected("range", f"{name} has too many, too long or unprintable frames")
        if sum(len(frame.encode()) for frame in raw) > MAX_STACK_BYTES:
            raise MessageRejected("range", f"{name} exceeds {MAX_STACK_BYTES} bytes")
        return tuple(raw)

    def encode(self, value: tuple[str, ...]) -> object:
        return list(value)

    def decreased(self, new: tuple[str, ...], old: tuple[str, ...]) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class Buckets:
    """The step histogram's cumulative bucket counts, one per STEP_BUCKETS bound and +Inf."""

    def decode(self, name: str, raw: object) -> tuple[int, ...]:
        if type(raw) is not list or len(raw) != len(STEP_BUCKETS) + 1:
            raise MessageRejected("schema", f"{name} is not {len(STEP_BUCKETS) + 1} counts")
        # One pass over plain ints: this runs for every datagram.
        if not all(type(v) is int and 0 <= v < MAX_COUNT for v in raw):
            raise MessageRejected("schema", f"{name} holds something other than counts")
        if any(a > b for a, b in itertools.pairwise(raw)):
            raise MessageRejected("range", f"{name} not cumulative")
        return tuple(raw)

    def encode(self, value: tuple[int, ...]) -> object:
        return list(value)

    def decreased(self, new: tuple[int, ...], old: tuple[int, ...]) -> bool:
        return any(n < o for n, o in zip(new, old, strict=True))


@dataclass(frozen=True, slots=True)
class Map:
    """A JSON object of at most `most` entries; each key becomes a label value."""

    key: Text
    value: Kind[Any]
    most: int

    def decode(self, name: str, raw: object) -> dict[str, object]:
        if type(raw) is not dict:
            raise MessageRejected("schema", f"{name} is {type(raw).__name__}")
        if len(raw) > self.most:
            raise MessageRejected("range", f"{name} has {len(raw)} entries > {self.most}")
        return {self.key.decode(name, k): self.value.decode(f"{name}.{k[:20]}", v) for k, v in raw.items()}

    def encode(self, value: Mapping[str, object]) -> object:
        return dict(value)

    def decreased(self, new: Mapping[str, object], old: Mapping[str, object]) -> bool:
        return any(k in old and self.value.decreased(v, old[k]) for k, v in new.items())


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: Kind[Any]
    cumulative: bool = False


@dataclass(frozen=True, slots=True)
class Rows:
    """A list of fixed-length lists, each made into `make(**values)`; unique by the `unique` columns.

    `distinct` caps the different values of a column (group labels) across the entries.
    """

    columns: tuple[Column, ...]
    make: Callable[..., object]
    unique: tuple[str, ...]
    most: int
    distinct: tuple[tuple[str, int], ...] = ()

    def decode(self, name: str, raw: object) -> tuple[object, ...]:
        if type(raw) is not list:
            raise MessageRejected("schema", f"{name} is {type(raw).__name__}")
        if len(raw) > self.most:
            raise MessageRejected("range", f"{name} has {len(raw)} entries > {self.most}")
        width = len(self.columns)
        rows = []
        seen = set()
        for entry in raw:
            if type(entry) is not list or len(entry) != width:
                raise MessageRejected("schema", f"{name} entry is not [{', '.join(c.name for c in self.columns)}]")
            values = {c.name: c.kind.decode(c.name, v) for c, v in zip(self.columns, entry, strict=True)}
            key = tuple(values[u] for u in self.unique)
            if key in seen:
                raise MessageRejected("schema", f"{name} has two entries for {key!r}"[:120])
            seen.add(key)
            rows.append(self.make(**values))
        for column, most in self.distinct:
            if len({getattr(row, column) for row in rows}) > most:
                raise MessageRejected("range", f"{name} has more than {most} distinct {column} values")
        return tuple(rows)

    def encode(self, value: tuple[object, ...]) -> object:
        return [[getattr(row, c.name) for c in self.columns] for row in value]

    def decreased(self, new: tuple[object, ...], old: tuple[object, ...]) -> bool:
        cumulative = [c.name for c in self.columns if c.cumulative]
        before = {self._key(row): row for row in old}
        for row in new:
            prev = before.get(self._key(row))
            if prev is not None and any(getattr(row, c) < getattr(prev, c) for c in cumulative):
                return True
        return False

    def _key(self, row: object) -> tuple[object, ...]:
        return tuple(getattr(row, u) for u in self.unique)


@dataclass(frozen=True, slots=True)
class Field:
    """One schema row: `path` in the datagram ("info.uuid" is nested), `attr` in `Report`."""

    path: str
    attr: str
    kind: Kind[Any]
    required: bool = False
    cumulative: bool = False  # never goes backwards within one incarnation


COUNT = Int(MAX_COUNT)
ID = Int(MAX_ID)
TIME = Number(hi=MAX_UNIX_TIME)
AMOUNT = Number()
LABEL = Text()
GROUP = Text(nonempty=True)

FIELDS: tuple[Field, ...] = (
    Field("type", "kind", Text(choices=KINDS), required=True),
    Field("job_id", "job_id", Text(nonempty=True), required=True),
    Field("rank", "rank", Int(MAX_ID, lo=DRIVER_RANK), required=True),
    Field("pid", "pid", ID, required=True),
    Field("start_time", "start_time", TIME, required=True),
    Field("seq", "seq", Int(MAX_SEQ), required=True),
    Field("sent_at", "sent_at", TIME),
    Field("exit_reason", "exit_reason", Text(choices=EXIT_REASONS)),
    Field("info.local_rank", "local_rank", ID),
    Field("info.world_size", "world_size", ID),
    Field("info.uuid", "uuid", LABEL),
    Field("info.backend", "backend", LABEL),
    Field("info.framework", "framework", LABEL),
    Field("info.loss_scaler", "loss_scaler", Text(choices=LOSS_SCALERS)),
    Field("info.pod", "pod", LABEL),
    Field("info.namespace", "namespace", LABEL),
    Field("steps", "steps", COUNT, cumulative=True),
    Field("samples", "samples", COUNT, cumulative=True),
    Field("tokens", "tokens", COUNT, cumulative=True),
    Field("microbatches", "microbatches", COUNT, cumulative=True),
    Field("info.pipeline_stage", "pipeline_stage", ID),
    Field("step_hist.buckets", "step_buckets", Buckets(), cumulative=True),
    Field("step_hist.sum", "step_seconds_sum", AMOUNT, cumulative=True),
    Field("last_step", "last_step", TIME),
    Field("first_step", "first_step", TIME),
    Field("phase", "phase", LABEL),
    Field("phase_seconds", "phase_seconds", Map(Text(nonempty=True), AMOUNT, MAX_PHASES + 1), cumulative=True),
    Field("comm_wait", "comm_wait", AMOUNT, cumulative=True),
    Field("data_wait", "data_wait", AMOUNT, cumulative=True),
    Field("model_flops", "model_flops", AMOUNT, cumulative=True),
    Field("collectives", "collectives", Rows(
        (Column("op", Text(choices=OPS)), Column("group", GROUP), Column("seconds", AMOUNT, cumulative=True),
         Column("calls", COUNT, cumulative=True), Column("bytes", COUNT, cumulative=True)),
        Collective, unique=("op", "group"), most=len(OPS) * (MAX_GROUPS + 1), distinct=(("group", MAX_GROUPS + 1),)),
        cumulative=True),
    Field("collectives_untimed", "collectives_untimed", Rows(
        (Column("op", Text(choices=OPS)), Column("group", GROUP), Column("calls", COUNT, cumulative=True)),
        UntimedCalls, unique=("op", "group"), most=len(OPS) * (MAX_GROUPS + 1), distinct=(("group", MAX_GROUPS + 1),)),
        cumulative=True),
    Field("groups", "group_seqs", Rows(
        (Column("group", GROUP), Column("issued", COUNT, cumulative=True),
         Column("completed", COUNT, cumulative=True)),
        GroupSeq, unique=("group",), most=MAX_GROUPS + 1), cumulative=True),
    Field("inflight", "inflight", Rows(
        (Column("group", GROUP), Column("op", Text(choices=OPS)), Column("since", TIME)),
        Inflight, unique=("group",), most=MAX_GROUPS + 1)),
    Field("inflight_age", "inflight_age", Map(GROUP, AMOUNT, MAX_GROUPS + 1)),
    Field("pg_timeouts", "pg_timeouts", Map(GROUP, AMOUNT, MAX_GROUPS + 1)),
    Field("collectives_captured", "collectives_captured", COUNT, cumulative=True),
    Field("group_sizes", "group_sizes", Map(GROUP, ID, MAX_GROUPS + 1)),
    Field("loss_scale", "loss_scale", AMOUNT),
    Field("skipped_steps", "skipped_steps", COUNT, cumulative=True),
    Field("loss", "loss", Number(lo=-MAX_AMOUNT, nan_ok=True)),
    Field("grad_norm", "grad_norm", Number(lo=-MAX_AMOUNT, nan_ok=True)),
    Field("nonfinite_losses", "nonfinite_losses", COUNT, cumulative=True),
    Field("loss_max", "loss_max", Number(lo=-MAX_AMOUNT)),
    Field("grad_norm_max", "grad_norm_max", Number(lo=-MAX_AMOUNT)),
    Field("loss_spikes", "loss_spikes", COUNT, cumulative=True),
    Field("grad_norm_spikes", "grad_norm_spikes", COUNT, cumulative=True),
    Field("nccl_env", "nccl_env", Map(Text(prefixes=NCCL_ENV_PREFIXES), LABEL, MAX_ENV)),
    Field("parallel", "parallel", Map(Text(choices=PARALLEL_KEYS), ID, len(PARALLEL_KEYS))),
    Field("cuda.alloc_retries", "cuda_alloc_retries", COUNT, cumulative=True),
    Field("cuda.ooms", "cuda_ooms", COUNT, cumulative=True),
    Field("hook_errors", "hook_errors", Map(Text(identifier=True), COUNT, MAX_HOOK_ERROR_KINDS), cumulative=True),
    Field("job_gauges", "job_gauges", Map(Text(identifier=True), Number(lo=-MAX_AMOUNT), MAX_JOB_GAUGES)),
    Field("hang_suspected", "hang_suspected", Int(2)),
    Field("stack", "stack", Frames()),
    Field("group_ranks", "group_ranks", Map(GROUP, Text(nonempty=True), MAX_GROUPS + 1)),
)
_PATHS = tuple((f, tuple(f.path.split("."))) for f in FIELDS)
# What validate() runs per field, looked up once: it runs for every datagram.
_PLAN = tuple((f.attr, f.path, f.kind.decode, path[:-1], path[-1], f.required) for f, path in _PATHS)
_CUMULATIVE = tuple(f for f in FIELDS if f.cumulative)


def encode(report: Report) -> bytes:
    """The datagram for `report`; optional values that are unknown (None) are left out."""
    msg: dict[str, Any] = {"v": VERSION}  # JSON: nested objects, one per dotted path prefix
    for f, path in _PATHS:
        value = getattr(report, f.attr)
        if value is None:
            continue
        parent = msg
        for part in path[:-1]:
            parent = parent.setdefault(part, {})
        parent[path[-1]] = f.kind.encode(value)
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
    """The second half of `decode`: every field of a parsed message, by the `FIELDS` table.

    Raises:
        MessageRejected: an unknown version, a missing or mistyped field, or a value out of range.
    """
    if msg.get("v") != VERSION or type(msg.get("v")) is not int:
        raise MessageRejected("version", repr(msg.get("v"))[:20])
    values: dict[str, Any] = {}  # each of the type its field's kind decodes, as `Report` declares
    for attr, path, decode, parents, leaf, required in _PLAN:
        parent: Mapping[str, object] = msg
        raw: object = None
        for part in parents:
            child = parent.get(part)
            if child is None:
                break
            if type(child) is not dict:
                raise MessageRejected("schema", f"{part} is {type(child).__name__}")
            parent = child
        else:
            raw = parent.get(leaf)
        if raw is None:
            if required:
                raise MessageRejected("schema", f"{path} missing")
            continue
        values[attr] = decode(path, raw)
    return Report(**values)


def went_backwards(new: Report, old: Report) -> str | None:
    """The first cumulative field of `new` that is lower than in `old`, the same process's earlier report."""
    for f in _CUMULATIVE:
        a, b = getattr(new, f.attr), getattr(old, f.attr)
        if a is not None and b is not None and f.kind.decreased(a, b):
            return f.path
    return None
