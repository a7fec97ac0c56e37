from __future__ import annotations

import pytest

from trainmon.parsers.job_mapping import JobLines, gpu_index_of, parse_job_lines


@pytest.mark.parametrize(("name", "expected"), [
    ("0", 0),
    ("7", 7),
    ("12", 12),
    ("3.1", 3),      # MIG: GPU 3, GPU instance 1
    (".lock", None),
    (".0.1234", None),  # the prolog's partial file
    ("0.tmp", None),
    ("gpu0", None),
    ("", None),
    ("\u0663", None),  # ARABIC-INDIC DIGIT THREE: `\d` matches it and int() reads 3
    ("1\u0663.0", None),
    ("9" * 5000, None),  # int() would raise past 4,300 digits
])
def test_gpu_index_of(name: str, expected: int | None) -> None:
    assert expected == gpu_index_of(name)


@pytest.mark.parametrize(("text", "expected"), [
    ("", JobLines((), ())),
    ("\n\n", JobLines((), ())),
    ("4242\n", JobLines(("4242",), ())),
    ("4242\n4243\n4242\n", JobLines(("4242", "4243"), ())),  # shared GPU, a repeat kept once
    ("  77  \r\n", JobLines(("77",), ())),
    ("123_4\n123+0\n", JobLines(("123_4", "123+0"), ())),  # array task, heterogeneous component
    ("4242\nnot a job id\n", JobLines(("4242",), (2,))),
    ("-rf\n", JobLines((), (1,))),
    ("x" * 100 + "\n\n$(reboot)\n", JobLines((), (1, 3))),
])
def test_parse_job_lines(text: str, expected: JobLines) -> None:
    assert expected == parse_job_lines(text)
