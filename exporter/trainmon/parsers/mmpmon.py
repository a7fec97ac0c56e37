"""GPFS `mmpmon -p -s` answers to `fs_io_s`: one line per mounted file system.

`_fs_io_s_ _n_ IP _nn_ NODE _rc_ 0 _t_ SECS _tu_ USECS _cl_ CLUSTER _fs_ NAME _d_ DISKS _br_ BYTES_READ
_bw_ BYTES_WRITTEN _oc_ OPENS _cc_ CLOSES _rdc_ READS _wc_ WRITES _dir_ READDIRS _iu_ INODE_UPDATES`:
keyword, value pairs; `_rc_` other than 0 means the request failed for that line.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmon.parsers.counters import u64

COUNTER_KEYS = ("_br_", "_bw_", "_oc_", "_cc_", "_rdc_", "_wc_", "_dir_")


@dataclass(frozen=True, slots=True)
class GpfsIo:
    filesystem: str
    counters: dict[str, int]  # COUNTER_KEYS -> value


@dataclass(frozen=True, slots=True)
class FsIoAnswer:
    records: dict[str, GpfsIo]  # by file-system name
    skipped: list[str]


def parse_fs_io_s(text: str) -> FsIoAnswer:
    records: dict[str, GpfsIo] = {}
    skipped: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        record = _record(fields)
        if isinstance(record, str):
            skipped.append(f"mmpmon line {number} {line.strip()[:60]!r}: {record}")
        else:
            records[record.filesystem] = record
    return FsIoAnswer(records, skipped)


def _record(fields: list[str]) -> GpfsIo | str:
    if fields[0] != "_fs_io_s_" or len(fields) % 2 != 1:
        return "not an _fs_io_s_ line of keyword-value pairs"
    pairs = dict(zip(fields[1::2], fields[2::2], strict=True))
    if pairs.get("_rc_") != "0":
        return f"_rc_ {pairs.get('_rc_')}"
    if "_fs_" not in pairs or not all(key in pairs for key in COUNTER_KEYS):
        return f"missing _fs_ or one of {' '.join(COUNTER_KEYS)}"
    counters = {key: value for key in COUNTER_KEYS if (value := u64(pairs[key])) is not None}
    if len(counters) < len(COUNTER_KEYS):
        return "a value that is not an unsigned 64-bit counter"
    return GpfsIo(pairs["_fs_"], counters)
