"""PCIe AER counters: a pure function of an `aer_dev_{correctable,nonfatal,fatal}` file's text.

The kernel (CONFIG_PCIEAER_STATS, drivers/pci/pcie/aer.c) writes one `NAME COUNT` line per error
type, then `TOTAL_ERR_COR` / `TOTAL_ERR_NONFATAL` / `TOTAL_ERR_FATAL`: the totals are left out
(a sum over the error label gives them).
"""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("correctable", "nonfatal", "fatal")
_TOTAL_PREFIX = "TOTAL_ERR_"


@dataclass(frozen=True, slots=True)
class AerCounts:
    counts: dict[str, float]  # error name as the kernel spells it (RxErr, BadTLP, CmpltTO, …) -> count
    bad_lines: tuple[str, ...]


def parse_aer(text: str) -> AerCounts:
    counts: dict[str, float] = {}
    bad: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].isdigit():
            bad.append(line.strip())
            continue
        if not parts[0].startswith(_TOTAL_PREFIX):
            counts[parts[0]] = float(parts[1])
    return AerCounts(counts, tuple(bad))
