"""The human form of a diagnosis, and its strict JSON."""

from __future__ import annotations

import json
import math

from trainmon.diagnose.model import Diagnosis, Finding, Hang, runbook_url


def strict_json(d: Diagnosis) -> str:
    """The `--json` object as RFC 8259 JSON: a value that is not finite (±Inf in what Prometheus answered)
    is null, never the `NaN`/`Infinity` that JSON parsers refuse."""
    return json.dumps(_finite(d.as_dict()), allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _where(f: Finding) -> str:
    parts = [f"rank {f.rank}" if f.rank is not None else "", f"on {f.instance}" if f.instance else "",
             f"GPU {f.uuid}" if f.uuid else "", f"mount {f.mount}" if f.mount else "",
             f"phase {f.phase}" if f.phase else ""]
    return " ".join(p for p in parts if p)


def _hang_lines(culprit: int | None, hang: Hang) -> list[str]:
    lines = [f"   class: {hang.hang_class}"]
    lines += [f"   ranks {', '.join(map(str, ranks))}: stack {signature}" for signature, ranks in hang.stack_groups]
    lines += [f"   outlier: rank {rank} on {instance}" + (f" GPU {uuid}" if uuid else "")
              for rank, instance, uuid in hang.outliers]
    if hang.stack:
        lines.append(f"   stack of rank {culprit} (innermost first):")
        lines.extend(f"     {frame}" for frame in hang.stack)
    return lines


def render(d: Diagnosis) -> str:
    lines = [f"trainmon diagnose: job {d.job_id}, last {d.since}: {d.ranks} rank(s), "
             f"{d.rank_seconds:.0f} rank-seconds"]
    if not d.findings:
        lines.append("nothing holds the job back above the reporting threshold")
    for i, f in enumerate(d.findings, 1):
        where = _where(f)
        lines.append(f"{i}. {f.cause} costs {f.share:.0%} of the job's time" + (f": {where}" if where else ""))
        lines.append(f"   {f.detail}")
        if f.straggler_cause is not None:
            recoverable = "unknown" if f.recoverable_share is None else f"{f.recoverable_share:.0%}"
            lines.append(f"   straggler cause: {f.straggler_cause}; recoverable without it: {recoverable} of the "
                         "job's step time")
        if f.suggestion:
            lines.append(f"   next: {f.suggestion}")
        if f.hang is not None:
            lines.extend(_hang_lines(f.rank, f.hang))
        for h in f.hardware:
            lines.append(f"   hardware on {h.instance}: {h.signal} {h.device}")
        if f.elsewhere:
            lines.append("   elsewhere on the job's nodes (not this GPU's or node's):")
            lines.extend(f"     {h.instance}: {h.signal} {h.device}" for h in f.elsewhere)
        lines.append(f"   runbook: {runbook_url(f.cause)}")
    mfu = "unknown" if d.mfu is None else f"{d.mfu:.1%}"
    lines.append(f"MFU {mfu} ({d.mfu_detail}); runbook: {runbook_url('mfu')}")
    goodput = "unknown" if d.goodput is None else f"{d.goodput:.0%}"
    lines.append(f"goodput {goodput} (compute time over the job's rank time); runbook: {runbook_url('goodput')}")
    return "\n".join(lines)
