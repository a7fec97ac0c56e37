"""The kernel-log XID parser on NVRM lines in the real formats (tests/fixtures/kmsg/NOTICE)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmon.parsers.kmsg import Nvlink5Detail, Record, XidLine, XidParser, nvml_bus, parse_text, split_record

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kmsg"


def test_every_xid_of_the_kmsg_records_with_its_bus_and_time() -> None:
    found, malformed = parse_text((FIXTURES / "nvrm.kmsg").read_text())

    assert [
        XidLine("0000:18:00", 13, 61.0), XidLine("0000:18:00", 13, 61.0001), XidLine("0000:28:00", 31, 62.0),
        XidLine("0000:c1:00", 48, 63.0), XidLine("0000:38:00", 94, 64.0), XidLine("0000:48:00", 79, 70.0),
        XidLine("0000:28:00", 79, 90.0),
    ] == found
    assert 2 == malformed  # the truncated and the garbled Xid line


def test_nvlink5_xids_carry_unit_severity_link_and_the_two_status_words() -> None:
    """XIDs 144-150 in the extended form (published production lines); XID 45 after one is plain."""
    found, malformed = parse_text((FIXTURES / "nvlink5.kmsg").read_text())

    assert [
        XidLine("0000:18:00", 144, 71.0, Nvlink5Detail("SAW_MVB", False, 0, 0x1, 0x8)),
        XidLine("0000:18:00", 145, 72.0, Nvlink5Detail("RLW_RXPIPE", False, 13, 0x0409A0C2, 0x8)),
        XidLine("0000:28:00", 149, 73.0, Nvlink5Detail("NETIR_LINK_EVT", True, 0, 0x025001C6, 0x0)),
        XidLine("0000:38:00", 149, 74.0, Nvlink5Detail("NETIR_LINK_EVT", True, 0, 0x026001C6, 0x0)),
        XidLine("0000:48:00", 149, 75.0, Nvlink5Detail("NETIR", True, -1, 0x000FE406, 0x0)),
        XidLine("0000:48:00", 45, 76.0),
    ] == found
    assert 0 == malformed


def test_an_nvlink5_xid_in_another_form_is_counted_without_detail() -> None:
    found, _ = parse_text("NVRM: Xid (PCI:0000:18:00): 145, NVLink error on link 3\n")

    assert [XidLine("0000:18:00", 145, None)] == found


def test_dmesg_text_mig_instances_and_lines_without_a_time() -> None:
    found, malformed = parse_text((FIXTURES / "nvrm.dmesg").read_text())

    assert [
        XidLine("0000:18:00", 13, 61.0), XidLine("0000:38:00", 94, 64.0), XidLine("0000:18:00", 43, 120.5),
        XidLine("0000:28:00", 119, None),
    ] == found
    assert 0 == malformed


def test_fallen_off_the_bus_in_words_alone_is_xid_79_once() -> None:
    """The one-line form counts when no explicit XID 79 of that GPU came just before; an explicit one long
    before is another event."""
    parser = XidParser()
    words = "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus."

    assert XidLine("0000:29:00", 79, 5.0) == parser.feed(Record(words, 5.0))
    assert XidLine("0000:29:00", 79, 10.0) == parser.feed(Record("NVRM: Xid (PCI:0000:29:00): 79, GPU has fallen "
                                                                 "off the bus.", 10.0))
    assert parser.feed(Record(words, 10.1)) is None
    assert XidLine("0000:29:00", 79, 500.0) == parser.feed(Record(words, 500.0))


def test_a_multi_record_message_needs_its_last_record() -> None:
    parser = XidParser()
    assert parser.feed(Record("NVRM: The NVIDIA GPU 0000:18:00.0", 1.0)) is None
    assert parser.feed(Record("NVRM: (PCI ID: 10de:2330) installed in this system has", 1.0)) is None
    assert parser.feed(Record("NVRM: some other driver line", 1.0)) is None
    assert XidLine("0000:18:00", 79, 1.0) == parser.feed(Record("NVRM: fallen off the bus and is not responding "
                                                                "to commands.", 1.1))
    assert parser.feed(Record("NVRM: fallen off the bus and is not responding to commands.", 2.0)) is None


@pytest.mark.parametrize(("line", "record"), [
    ("4,1002,61000000,-;NVRM: x", Record("NVRM: x", 61.0, 1002, 0)),
    ("4,1002,61000000,c,more;NVRM: x\n", Record("NVRM: x", 61.0, 1002, 0)),
    ("14,1002,61000000,-;NVRM: x", Record("NVRM: x", 61.0, 1002, 1)),
    ("[   61.500000] NVRM: x", Record("NVRM: x", 61.5)),
    ("NVRM: x", Record("NVRM: x")),
    (" DEVICE=+pci:0000:18:00.0", None),
])
def test_split_record(line: str, record: Record | None) -> None:
    assert record == split_record(line)


@pytest.mark.parametrize(("nvml", "kernel"), [("00000000:18:00.0", "0000:18:00"), ("00000001:C1:00.0", "0001:c1:00")])
def test_nvml_bus_ids_in_kernel_log_form(nvml: str, kernel: str) -> None:
    assert kernel == nvml_bus(nvml)


# x86's report of a fatal segfault (arch/x86/mm/fault.c show_signal_msg, mm/memory.c print_vma_addr), one
# record at KERN_INFO (priority 6, facility 0): `comm[pid]: segfault at ADDR ip IP sp SP error CODE in
# FILE[OFFSET,START+SIZE] likely on CPU N (core C, socket S)`, where FILE is the name of the file mapped at
# the faulting instruction, which the user who ran the program chose.
SPOOF = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus."
SEGFAULT = (f"6,2210,86400000000,-;a.out[31337]: segfault at 0 ip 00007f3c1e2a1000 sp 00007ffd5e8b3c40 error 4 "
            f"in {SPOOF}[1000,7f3c1e2a0000+1000] likely on CPU 3 (core 3, socket 0)\n")
GENUINE = ("3,2211,86400100000,-;NVRM: Xid (PCI:0000:28:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
           "off the bus.\n")


@pytest.mark.parametrize("forged", [
    SEGFAULT,
    f"14,2212,86400200000,-;{SPOOF}\n",  # user facility, level info: what a write to /dev/kmsg makes
    f"12,2212,86400200000,-;{SPOOF}\n",
    "14,2213,86400300000,-;NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.\n",
    "14,2214,1,-;NVRM: The NVIDIA GPU 0000:18:00.0\n6,2215,2,-;x\n14,2216,3,-;NVRM: fallen off the bus and is not "
    "responding to commands.\n",
    f"6,2217,86400400000,-;kernel: {SPOOF}\n",
])
def test_only_the_kernel_facility_in_the_drivers_own_words_is_an_xid(forged: str) -> None:
    """A user chooses the file name a segfault report ends with, and can write user-facility records: neither
    makes a GPU fall off the bus; the driver's own record beside them still does."""
    found, malformed = parse_text(forged + GENUINE)

    assert [XidLine("0000:28:00", 79, 86400.1)] == found
    assert 0 == malformed


def test_a_code_too_long_to_be_one_is_malformed() -> None:
    found, malformed = parse_text(f"4,1,1,-;NVRM: Xid (PCI:0000:18:00): {'7' * 5000}, pid=1\n")

    assert ([], 1) == (found, malformed)
