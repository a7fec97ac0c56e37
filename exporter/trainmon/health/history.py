"""What the health verdict remembers between cycles, daemon restarts and reboots (gpud's escalation rule).

Per GPU (by UUID): when trainmon last saw it come back from a reset in the current boot, whether it was
down when last seen, and for each XID whose catalog action is a GPU reset or a reboot, when and in which
boot it was last seen. The same XID again after a fix (the GPU came back from a reset, or the node
booted: its boot id changed) means the fix does not hold: `recurred` names the fix, and the verdict is
drain. `encode`/`decode` are the state file's format (JSON); the file's I/O is in
`trainmon.health.state_file`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from trainmon.health.catalog import Action, action_of
from trainmon.health.verdict import XidSeen
from trainmon.health.xid_catalog import CATALOG

FORMAT_VERSION = 1
# gpud's look-back (its event store keeps 3 days): an XID older than this is a new incident, not a recurrence.
RETENTION_SECONDS = 3 * 86_400.0
MAX_GPUS = 64  # a node has at most a few dozen; beyond this the GPUs seen longest ago are forgotten
AFTER_REBOOT = "a reboot"
AFTER_RESET = "a GPU reset"


def remembered(xid: int) -> bool:
    """XIDs whose catalog fix is a GPU reset or a reboot: only their recurrence says the fix did not hold."""
    entry = CATALOG.get(xid)
    return entry is not None and action_of(entry) in (Action.RESET_GPU, Action.REBOOT)


@dataclass(frozen=True, slots=True)
class XidRecord:
    boot_id: str  # the boot it was last seen in
    last_seen: float  # Unix time
    recurred: str = ""  # the fix it came back after (AFTER_REBOOT, AFTER_RESET); "" if it has not


@dataclass(frozen=True, slots=True)
class GpuHistory:
    boot_id: str  # the boot `reset_at` and `down` belong to
    reset_at: float | None = None  # Unix time trainmon saw it come back from a reset, in that boot
    down: bool = False
    xids: Mapping[int, XidRecord] = field(default_factory=dict)

    @property
    def last_seen(self) -> float:
        return max((r.last_seen for r in self.xids.values()), default=self.reset_at or 0.0)


@dataclass(frozen=True, slots=True)
class Memory:
    """What the verdict of one GPU needs from its history (`trainmon.health.verdict.Signals`)."""

    reset_at: float | None
    recurred: Mapping[int, str]


class HealthHistory:
    """The histories of a node's GPUs in the boot `boot_id`, from the saved ones; `changed` since `saved()`."""

    def __init__(self, boot_id: str, saved: Mapping[str, GpuHistory] | None = None) -> None:
        self._boot_id = boot_id
        self._gpus = {uuid: _in_boot(history, boot_id) for uuid, history in (saved or {}).items()}
        self.changed = False

    def observe(self, uuid: str, up: bool, xids: Iterable[XidSeen], now: float) -> Memory:
        """Note this cycle's state of a GPU and its XIDs (this boot's, with their last time)."""
        before = self._gpus.get(uuid, GpuHistory(self._boot_id))
        history = before
        if not up:
            history = replace(history, down=True)
        elif history.down:
            history = replace(history, down=False, reset_at=now)
        records = dict(history.xids)
        for seen in xids:
            if remembered(seen.xid):
                records[seen.xid] = _sighting(records.get(seen.xid), seen, history, self._boot_id)
        history = replace(history, xids=records)
        if history != before:
            self._gpus[uuid] = history
            self.changed = True
        return Memory(history.reset_at, {xid: r.recurred for xid, r in records.items()
                                         if r.recurred and _current(r, history, self._boot_id)})

    def saved(self, now: float) -> dict[str, GpuHistory]:
        """What to write: records within the retention, at most MAX_GPUS GPUs (the most recently active)."""
        self.changed = False
        kept = {uuid: replace(h, xids={x: r for x, r in h.xids.items() if now - r.last_seen <= RETENTION_SECONDS})
                for uuid, h in self._gpus.items()}
        newest = sorted(kept, key=lambda uuid: kept[uuid].last_seen, reverse=True)[:MAX_GPUS]
        return {uuid: kept[uuid] for uuid in sorted(newest)}


def _in_boot(history: GpuHistory, boot_id: str) -> GpuHistory:
    """A saved history seen from the boot `boot_id`: a reboot ended its reset time and its down state."""
    return history if history.boot_id == boot_id else replace(history, boot_id=boot_id, reset_at=None, down=False)


def _sighting(record: XidRecord | None, seen: XidSeen, history: GpuHistory, boot_id: str) -> XidRecord:
    if record is None:
        return XidRecord(boot_id, seen.last_seen)
    if seen.last_seen <= record.last_seen:
        return record
    recurred = record.recurred
    if record.boot_id != boot_id:
        recurred = AFTER_REBOOT
    elif history.reset_at is not None and record.last_seen < history.reset_at < seen.last_seen:
        recurred = AFTER_RESET
    return XidRecord(boot_id, seen.last_seen, recurred)


def _current(record: XidRecord, history: GpuHistory, boot_id: str) -> bool:
    """The record's last sighting is in this boot and after the GPU's last reset (no fix tried since)."""
    return record.boot_id == boot_id and (history.reset_at is None or record.last_seen > history.reset_at)


def encode(gpus: Mapping[str, GpuHistory]) -> str:
    return json.dumps({"version": FORMAT_VERSION, "gpus": {
        uuid: {"boot_id": h.boot_id, "reset_at": h.reset_at, "down": h.down,
               "xids": {str(x): {"boot_id": r.boot_id, "last_seen": r.last_seen, "recurred": r.recurred}
                        for x, r in sorted(h.xids.items())}}
        for uuid, h in gpus.items()}}, indent=1, sort_keys=True) + "\n"


def decode(text: str) -> dict[str, GpuHistory]:
    """The histories in a state file's text.

    Raises:
        ValueError: saying what is wrong (not JSON, another version, a field of the wrong type).
    """
    document = json.loads(text)
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a version {FORMAT_VERSION} trainmon health state")
    try:
        return {str(uuid): _gpu(value) for uuid, value in document["gpus"].items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed health state ({type(exc).__name__}: {exc})") from None


def _gpu(value: dict[str, object]) -> GpuHistory:
    reset_at = value["reset_at"]
    xids = value["xids"]
    if not isinstance(xids, dict) or not (reset_at is None or isinstance(reset_at, (int, float))):
        raise TypeError("xids must be an object and reset_at a number or null")
    return GpuHistory(boot_id=_text(value["boot_id"]), reset_at=None if reset_at is None else float(reset_at),
                      down=value["down"] is True,
                      xids={int(x): XidRecord(_text(r["boot_id"]), _number(r["last_seen"]), _text(r["recurred"]))
                            for x, r in xids.items()})


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)
