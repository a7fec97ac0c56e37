"""The AER statistics parser on the kernel's layout (tests/fixtures/aer/NOTICE)."""

from __future__ import annotations

from pathlib import Path

from trainmon.parsers.aer import parse_aer

FIXTURES = Path(__file__).parent.parent / "fixtures" / "aer"


def test_every_error_without_the_total() -> None:
    parsed = parse_aer((FIXTURES / "aer_dev_correctable").read_text())

    assert {"RxErr": 2, "BadTLP": 0, "BadDLLP": 1, "Rollover": 0, "Timeout": 0, "NonFatalErr": 0,
            "CorrIntErr": 0, "HeaderOF": 0} == parsed.counts
    assert () == parsed.bad_lines


def test_a_garbled_line_is_skipped_and_named_the_rest_kept() -> None:
    parsed = parse_aer("CmpltTO 1\nMalfTLP x\nECRC\n\nTOTAL_ERR_FATAL 1\n")

    assert {"CmpltTO": 1} == parsed.counts
    assert ("MalfTLP x", "ECRC") == parsed.bad_lines
