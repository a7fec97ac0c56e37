"""RAS's JSON status, reduced per job, from fixtures in the layout NCCL writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmon.parsers.nccl_ras import AnswerError, reduce_answer

RAS = Path(__file__).parents[1] / "fixtures" / "nccl" / "ras"


def test_a_healthy_16_rank_job_reduces_to_a_few_numbers() -> None:
    s = reduce_answer((RAS / "status_healthy_16.json").read_text())

    assert ("2.30.7", 3, 16, 0) == (s.nccl_version, s.communicators, s.ranks, s.mismatched)
    assert {"unresponsive": 0, "dead": 0, "absent": 0} == s.missing
    assert all(n == 0 for n in s.errors.values())


def test_an_unresponsive_rank_and_a_rank_behind_are_counted_once() -> None:
    s = reduce_answer((RAS / "status_unresponsive_16.json").read_text())

    assert {"unresponsive": 1, "dead": 0, "absent": 0} == s.missing
    assert 15 == s.ranks
    assert 2 == s.mismatched  # rank 3 is one AllReduce behind in the world and in its node's communicator


@pytest.mark.parametrize("text", ["", "{", "[]", '{"communicators": 3}', '{"communicators": [{"ranks": [{}]}]}',
                                  "SERVER PROTOCOL 2\nOK\n"])
def test_what_is_not_a_ras_status_is_an_answer_error(text: str) -> None:
    with pytest.raises(AnswerError):
        reduce_answer(text)
