"""NCCL RAS's JSON `STATUS` answer (NVIDIA/nccl `src/ras/client_support.cc`, `rasDumpCommsToJSON`), reduced.

The answer is job-wide: `{"nccl_version", "cuda_runtime_version", "cuda_driver_version", "timestamp",
"communicators_count", "communicators": [{"hash", "secondary_hash", "size", "ranks_count",
"missing_ranks_count", "ranks": [{"rank", "host", "pid", "cuda_dev", "nvml_dev", "status": {"init_state",
"async_error", "finalize_called", "destroy_flag", "abort_flag"}, "collective_counts": {"Broadcast", "Reduce",
"AllGather", "ReduceScatter", "AllReduce"}}], "missing_ranks": [{"rank", "host", "pid", "cuda_dev",
"nvml_dev", "status": {"unresponsive", "considered_dead"}}]}], "ras": {"collection_time_sec",
"timeouts_count"}}`. It lists every rank of every communicator (a 512-rank job's answer is megabytes), so it
is reduced here to a few numbers per job before anything is exported: never a series per rank per communicator.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MISSING_KINDS = ("unresponsive", "dead", "absent")
NAMED_KINDS = ("dead", "unresponsive")  # the kinds whose ranks are named (`absent` ones are counted only)
NAMED_PER_KIND = 8  # the most missing ranks named per kind: a lost node's GPUs; the rest are in the counts
ERROR_KINDS = ("async_error", "abort", "finalize", "destroy")
ERROR_FIELDS = {"async_error": "async_error", "abort_flag": "abort", "finalize_called": "finalize",
                "destroy_flag": "destroy"}


class AnswerError(ValueError):
    """The answer is not a RAS JSON status document."""


@dataclass(frozen=True, slots=True)
class MissingRank:
    """A rank RAS says is missing from the job's widest communicator, whose comm ranks are the global ranks."""

    rank: int
    kind: str  # one of NAMED_KINDS
    host: str  # as RAS names the rank's node (its address)


@dataclass(frozen=True, slots=True)
class RasSummary:
    """What one answer says, per job: small and bounded whatever the job's size.

    Attributes:
        missing: kind -> the most ranks of that kind missing from any one communicator (the world
            communicator lists them all): `dead` (considered dead, ~60 s), `unresponsive` (~5 s), `absent`
            (neither: not in the communicator's data yet).
        errors: kind -> processes with that error state set on any of their ranks.
        mismatched: communicators whose ranks disagree on the count of some collective type.
        pids: the pids of the ranks that answered, to find the job through the hook's ranks on this node.
        named: the missing ranks of the widest communicator (the largest `size`: the world's, whose comm ranks
            are the global ranks), dead and unresponsive, lowest first, at most `NAMED_PER_KIND` of each kind.
    """

    nccl_version: str
    communicators: int
    ranks: int
    missing: Mapping[str, int]
    errors: Mapping[str, int]
    mismatched: int
    pids: frozenset[int]
    named: tuple[MissingRank, ...] = ()


def reduce_answer(text: str) -> RasSummary:
    """Reduce one JSON answer.

    Raises:
        AnswerError: not JSON, or not shaped like RAS's JSON status.
    """
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise AnswerError(f"not JSON: {exc}") from None
    comms = doc.get("communicators") if isinstance(doc, dict) else None
    if not isinstance(comms, list) or not all(isinstance(c, dict) for c in comms):
        raise AnswerError("no communicators list: not a RAS JSON status (is the format json?)")
    try:
        return _summary(str(doc.get("nccl_version", "unknown")), comms)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AnswerError(f"unexpected structure: {type(exc).__name__}: {exc}") from None


def _summary(version: str, comms: list[dict[str, object]]) -> RasSummary:
    missing = dict.fromkeys(MISSING_KINDS, 0)
    errors: dict[str, set[tuple[str, int]]] = {kind: set() for kind in ERROR_KINDS}
    processes: set[tuple[str, int]] = set()
    pids: set[int] = set()
    mismatched = 0
    for comm in comms:
        ranks = _objects(comm.get("ranks", []))
        for rank in ranks:
            process = (str(rank["host"]), int(str(rank["pid"])))
            processes.add(process)
            pids.add(process[1])
            for kind in _errors(_mapping(rank.get("status", {}))):
                errors[kind].add(process)
        if _mismatched(_mapping(r.get("collective_counts", {})) for r in ranks):
            mismatched += 1
        for kind, n in _missing(_objects(comm.get("missing_ranks", []))).items():
            missing[kind] = max(missing[kind], n)
    return RasSummary(nccl_version=version, communicators=len(comms), ranks=len(processes), missing=missing,
                      errors={kind: len(p) for kind, p in errors.items()}, mismatched=mismatched,
                      pids=frozenset(pids), named=_named(comms))


def _named(comms: list[dict[str, object]]) -> tuple[MissingRank, ...]:
    """The widest communicator's missing ranks by kind (the first of the widest where several tie)."""
    if not comms:
        return ()
    widest = max(comms, key=lambda c: int(str(c.get("size", 0))))
    found = sorted((int(str(r["rank"])), _kind(r), str(r.get("host", ""))) for r in
                   _objects(widest.get("missing_ranks", [])))
    return tuple(MissingRank(rank, kind, host) for want in NAMED_KINDS
                 for rank, kind, host in [f for f in found if f[1] == want][:NAMED_PER_KIND])


def _kind(rank: Mapping[str, object]) -> str:
    status = _mapping(rank.get("status", {}))
    return "dead" if status.get("considered_dead") is True else (
        "unresponsive" if status.get("unresponsive") is True else "absent")


def _missing(ranks: Iterable[Mapping[str, object]]) -> dict[str, int]:
    counts = dict.fromkeys(MISSING_KINDS, 0)
    for rank in ranks:
        counts[_kind(rank)] += 1
    return counts


def _errors(status: Mapping[str, object]) -> list[str]:
    return [kind for field, kind in ERROR_FIELDS.items() if status.get(field) not in (None, 0, False)]


def _mismatched(counts: Iterable[Mapping[str, object]]) -> bool:
    """Ranks of one communicator that disagree on any collective type's count (RAS's op-count mismatch)."""
    seen: dict[str, object] = {}
    for per_type in counts:
        for name, n in per_type.items():
            if seen.setdefault(name, n) != n:
                return True
    return False


def _objects(value: object) -> list[Mapping[str, object]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise TypeError("expected a list of objects")
    return value


def _mapping(value: object) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise TypeError("expected an object")
    return value


__all__ = ["ERROR_KINDS", "MISSING_KINDS", "NAMED_KINDS", "NAMED_PER_KIND", "AnswerError", "MissingRank", "RasSummary",
           "reduce_answer"]
