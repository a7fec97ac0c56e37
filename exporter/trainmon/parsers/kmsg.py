"""XIDs in kernel-log records: a pure function of the text, with the I/O in trainmon.health.kmsg_reader.

A `/dev/kmsg` record is `PRIORITY,SEQUENCE,MICROSECONDS,FLAGS;MESSAGE`, followed by ` KEY=VALUE` lines
(ignored here). PRIORITY is `facility << 3 | level`: the kernel's own messages are facility 0, while a
record written into /dev/kmsg from user space always has a facility of 1 (LOG_USER) or more, so only
facility 0 can be the driver. A plain `dmesg` line (`[  12.345678] MESSAGE`) or a bare message is read
too, with no time and no facility (a saved log the operator chose: `dmesg --facility=kern` keeps it to
the kernel's). The NVIDIA driver (NVRM) logs an XID as `NVRM: Xid (PCI:0000:18:00): 79, pid=…, …`,
always at the start of its record: other kernel messages quote what users choose (x86's segfault report
ends with the name of the file mapped at the faulting address), so an NVRM line is one that *begins*
with `NVRM: `. A GPU that has fallen off the bus may say so without the word Xid, in one line or over
three records
(`NVRM: The NVIDIA GPU 0000:18:00.0` / `NVRM: (PCI ID: 10de:2330) installed in this system has` /
`NVRM: fallen off the bus and is not responding to commands.`): that is XID 79 (NVIDIA's catalog).
The NVLink5 XIDs 144-150 (Blackwell) carry more after the code: the unit, Fatal or Nonfatal, the link and
the interrupt info and error status words (`145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008
…)`); `Nvlink5Detail` holds them, for `trainmon.health.nvlink5`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FALLEN_OFF_THE_BUS_XID = 79
# The driver logs `Xid …: 79` and the words "fallen off the bus" for the same event; within this many
# seconds of an explicit XID 79 of that GPU the words add nothing.
SAME_EVENT_SECONDS = 60.0
MAX_BUSES = 64  # explicit XID 79 times remembered (buses of one node, foreign ones included)

KERNEL_FACILITY = 0
_RECORD = re.compile(r"([0-9]{1,10}),([0-9]{1,20}),([0-9]{1,20}),[^;]*;(.*)")
_DMESG = re.compile(r"\[ *([0-9]{1,12})\.([0-9]{1,9})\] ?(.*)")
_DRIVER_PREFIX = "NVRM: "
# The parentheses may hold more than the bus (`PCI:0000:01:00 GPU-I:05` on a MIG instance).
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\): ([0-9]{1,9}),")
_XID_PREFIX = "NVRM: Xid"
NVLINK5_XIDS = range(144, 151)
_NVLINK5 = re.compile(r"\): [0-9]+, ([A-Z0-9_/]+) (Fatal|Nonfatal) XC[0-9]+ i[0-9]+ Link (-?[0-9]{1,9}) "
                      r"\((0x[0-9a-fA-F]{1,8}) (0x[0-9a-fA-F]{1,8})")
_OFF_BUS_ONE_LINE = re.compile(r"NVRM: GPU (?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2})\.[0-7]: "
                               r"GPU has fallen off the bus")
_OFF_BUS_FIRST = re.compile(r"NVRM: The NVIDIA GPU (?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2})\.[0-7]\s*$")
_OFF_BUS_LAST = "NVRM: fallen off the bus and is not responding to commands"


@dataclass(frozen=True, slots=True)
class Record:
    """One kernel-log message; `seconds` since boot (None for a line without a time); `facility` from the
    record's priority (None for a line without one)."""

    message: str
    seconds: float | None = None
    sequence: int | None = None
    facility: int | None = None

    @property
    def from_driver(self) -> bool:
        """Whether the kernel (not a user-space writer) logged it and it is in a driver's own words."""
        return self.facility in (None, KERNEL_FACILITY) and self.message.startswith(_DRIVER_PREFIX)


@dataclass(frozen=True, slots=True)
class Nvlink5Detail:
    """What an NVLink5 XID line (144-150) says after its code; `link` is -1 where the driver names none."""

    unit: str  # e.g. RLW_RXPIPE, NETIR_LINK_EVT
    fatal: bool
    link: int
    intrinfo: int
    error_status: int


@dataclass(frozen=True, slots=True)
class XidLine:
    """An XID the driver logged: `bus` is `0000:18:00` (domain:bus:device, lower case)."""

    bus: str
    xid: int
    seconds: float | None
    nvlink5: Nvlink5Detail | None = None  # XIDs 144-150 in the extended form


def split_record(line: str) -> Record | None:
    """A record from one line of /dev/kmsg or dmesg text; None for a ` KEY=VALUE` continuation line."""
    if line.startswith(" "):
        return None
    text = line.rstrip("\n")
    match = _RECORD.match(text)
    if match:
        return Record(match.group(4), int(match.group(3)) / 1e6, int(match.group(2)), int(match.group(1)) >> 3)
    match = _DMESG.match(text)
    if match:
        return Record(match.group(3), float(f"{match.group(1)}.{match.group(2)}"))
    return Record(text)


def bus_id(domain: str | None, bus_device: str) -> str:
    """The `DDDD:BB:DD` form NVML's PCI bus id starts with (`00000000:18:00.0` → `0000:18:00`)."""
    return f"{(domain or '0000').rstrip(':').lower()[-4:]}:{bus_device.lower()}"


def nvlink5_detail(message: str) -> Nvlink5Detail | None:
    """The unit, severity, link and the first two words of an NVLink5 XID line; None in another form."""
    match = _NVLINK5.search(message)
    if match is None:
        return None
    unit, severity, link, intrinfo, status = match.groups()
    return Nvlink5Detail(unit, severity == "Fatal", int(link), int(intrinfo, 16), int(status, 16))


def nvml_bus(pci_bus_id: str) -> str:
    """NVML's `00000000:18:00.0` as the kernel log names it: `0000:18:00`."""
    domain, _, rest = pci_bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest.rsplit('.', 1)[0]}"


class XidParser:
    """Turns records into XIDs; keeps only the first line of a pending multi-record "fallen off" message.

    `malformed` counts NVRM Xid lines it could not read (truncated or garbled): skipped, never fatal.
    """

    __slots__ = ("_explicit_off_bus", "_fallen", "malformed")

    def __init__(self) -> None:
        self._fallen: tuple[str, float | None] | None = None
        self._explicit_off_bus: dict[str, float | None] = {}
        self.malformed = 0

    def feed(self, record: Record) -> XidLine | None:
        if not record.from_driver:
            return None
        message = record.message
        match = _XID.match(message)
        if match:
            code = int(match.group(3))
            detail = nvlink5_detail(message) if code in NVLINK5_XIDS else None
            xid = XidLine(bus_id(match.group(1), match.group(2)), code, record.seconds, detail)
            if xid.xid == FALLEN_OFF_THE_BUS_XID:
                if len(self._explicit_off_bus) >= MAX_BUSES:
                    self._explicit_off_bus.clear()
                self._explicit_off_bus[xid.bus] = xid.seconds
            return xid
        if message.startswith(_XID_PREFIX):
            self.malformed += 1
            return None
        match = _OFF_BUS_ONE_LINE.match(message)
        if match:
            return self._implied(bus_id(match.group(1), match.group(2)), record.seconds)
        match = _OFF_BUS_FIRST.match(message)
        if match:
            self._fallen = (bus_id(match.group(1), match.group(2)), record.seconds)
            return None
        if message.startswith(_OFF_BUS_LAST) and self._fallen is not None:
            bus, seconds = self._fallen
            self._fallen = None
            return self._implied(bus, seconds)
        return None

    def _implied(self, bus: str, seconds: float | None) -> XidLine | None:
        """XID 79 from the words alone, unless the driver also logged it as an XID just before."""
        if bus in self._explicit_off_bus:
            explicit = self._explicit_off_bus[bus]
            if explicit is None or seconds is None or abs(seconds - explicit) <= SAME_EVENT_SECONDS:
                return None
        return XidLine(bus, FALLEN_OFF_THE_BUS_XID, seconds)


def parse_text(text: str) -> tuple[list[XidLine], int]:
    """Every XID in a kernel-log text, and how many NVRM Xid lines could not be read."""
    parser = XidParser()
    found = [xid for line in text.splitlines() if (record := split_record(line)) is not None
             if (xid := parser.feed(record)) is not None]
    return found, parser.malformed
