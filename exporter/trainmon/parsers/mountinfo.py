"""<procfs>/self/mountinfo (proc(5)): the network and parallel file-system mounts of this node.

A line is `id parent major:minor root mount_point options [optional fields...] - fstype source
super_options`; the mount point and source escape space, tab, newline and backslash as octal
(`\\040`). Local file systems are not kept: only the types in `NETWORK_FSTYPES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The client types that talk to servers; the `fs` collector reads counters for some, serves info for all.
NETWORK_FSTYPES = frozenset({
    "lustre", "gpfs", "nfs", "nfs4", "ceph", "beegfs", "cifs", "smb3", "wekafs",
    "fuse.ceph-fuse", "fuse.glusterfs", "fuse.juicefs", "fuse.weka",
})
MAX_SKIPPED_NOTES = 20
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
_MIN_FIELDS_AFTER_SEPARATOR = 2  # fstype and source; super options may be empty


@dataclass(frozen=True, slots=True)
class Mount:
    mount_point: str
    fstype: str
    source: str
    super_options: str


@dataclass(frozen=True, slots=True)
class Mounts:
    """The network mounts, one per mount point (the last listed: the one on top), and the lines skipped."""

    records: list[Mount]
    skipped: list[str]


def unescape(field: str) -> str:
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> Mounts:
    by_point: dict[str, Mount] = {}
    skipped: list[str] = []
    # "\n" only, as the kernel ends lines: a mount point may hold U+2028, NEL, VT or FF (it escapes only
    # space, tab, newline and backslash), which str.splitlines() would split on.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip(" \t"):
            continue
        mount = _mount(line.split(" "))
        if isinstance(mount, str):
            skipped.append(f"mountinfo line {number} {line.strip()[:60]!r}: {mount}")
        elif mount is not None:
            by_point.pop(mount.mount_point, None)  # re-insert: order follows the mount that is on top
            by_point[mount.mount_point] = mount
    if len(skipped) > MAX_SKIPPED_NOTES:
        skipped[MAX_SKIPPED_NOTES - 1:] = [f"{len(skipped) - MAX_SKIPPED_NOTES + 1} more mountinfo lines skipped"]
    return Mounts(list(by_point.values()), skipped)


def _mount(fields: list[str]) -> Mount | str | None:
    """A network mount, None for any other mount, or why the line is not a mountinfo line."""
    if "-" not in fields[6:]:
        return "no ' - ' separator"
    separator = fields.index("-", 6)
    after = fields[separator + 1:]
    if len(after) < _MIN_FIELDS_AFTER_SEPARATOR:
        return "no file-system type and source"
    fstype = after[0]
    if fstype not in NETWORK_FSTYPES:
        return None
    return Mount(mount_point=unescape(fields[4]), fstype=fstype, source=unescape(after[1]),
                 super_options=after[2] if len(after) > 2 else "")
