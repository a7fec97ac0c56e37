from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmon.parsers.infiniband import parse_counter, parse_rate, parse_state


@pytest.mark.parametrize(("text", "expected"), [
    ("4: ACTIVE", (4, "ACTIVE")),
    ("1: DOWN", (1, "DOWN")),
    ("5: LinkUp", (5, "LinkUp")),
    ("3: Disabled\n", (3, "Disabled")),
    ("ACTIVE", None),
    ("", None),
    ("4: PortConfigurationTraining", (4, "PortConfigurationTraining")),
    ("4: " + "A" * 40, None),       # the name is a label value: a page of text is not a state
    ("9" * 400 + ": ACTIVE", None),
])
def test_parse_state(text: str, expected: tuple[int, str] | None) -> None:
    assert expected == parse_state(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("400 Gb/sec (4X NDR)", 50_000_000_000),
    ("100 Gb/sec (4X EDR)", 12_500_000_000),
    ("25 Gb/sec (1X EDR)", 3_125_000_000),
    ("2.5 Gb/sec (1X SDR)", 312_500_000),
    ("0 GB/sec", 0),
    ("unknown", None),
    ("9" * 400 + " Gb/sec", None),  # float() of it is inf, and round(inf) raises
])
def test_parse_rate(text: str, expected: int | None) -> None:
    assert expected == parse_rate(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("18126345378", 18126345378),
    ("0\n", 0),
    ("N/A (no PMA)", None),
    ("-1", None),
    ("", None),
    ("18446744073709551615", (1 << 64) - 1),
    ("18446744073709551616", None),  # over 64 bits: not from a kernel
    ("9" * 5000, None),              # int() of it raises ValueError
    ("+5", None),
    ("\u0661", None),               # isdigit() is true of an Arabic-Indic one
])
def test_parse_counter(text: str, expected: int | None) -> None:
    """`N/A (no PMA)` and other non-numbers are absent values, not zeros."""
    assert expected == parse_counter(text)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), st.from_regex(r"\s*-?[0-9]{0,500}(\.[0-9]{0,500})?\s*(: \S{0,50}| Gb/sec.*)?",
                                                     fullmatch=True)))
def test_any_attribute_text_parses_to_a_servable_value_or_none(text: str) -> None:
    """No text raises; what parses is a value a float can carry and a short label."""
    counter, rate, state = parse_counter(text), parse_rate(text), parse_state(text)

    assert counter is None or 0 <= counter < 1 << 64
    assert rate is None or 0 <= rate < 1 << 64
    assert state is None or (0 <= state[0] < 1000 and len(state[1]) <= 32)
