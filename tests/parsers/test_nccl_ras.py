"""RAS's JSON status, reduced per job, from fixtures in the layout NCCL writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmon.parsers.nccl_ras import AnswerError, MissingRank, reduce_answer

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
    assert (MissingRank(11, "unresponsive", "10.0.0.2"),) == s.named  # the world's rank, not its node comm's 3


def test_a_lost_node_names_its_dead_ranks_with_their_host_from_the_world_communicator() -> None:
    s = reduce_answer((RAS / "status_dead_16.json").read_text())

    assert {"unresponsive": 1, "dead": 8, "absent": 0} == s.missing
    assert [MissingRank(r, "dead", "10.0.0.2") for r in range(8, 16)] + [MissingRank(6, "unresponsive", "10.0.0.1")] \
        == list(s.named)


def test_at_most_eight_ranks_are_named_per_kind_the_counts_keep_the_rest() -> None:
    missing = [{"rank": r, "host": f"h{r}", "pid": r, "cuda_dev": 0, "nvml_dev": 0,
                "status": {"unresponsive": True, "considered_dead": r % 2 == 0}} for r in range(30, 0, -1)]
    comms = [{"size": 4, "missing_ranks": missing[:2]}, {"size": 64, "ranks": [], "missing_ranks": missing}]
    s = reduce_answer(json.dumps({"communicators": comms}))

    assert {"unresponsive": 15, "dead": 15, "absent": 0} == s.missing
    assert [("dead", r) for r in range(2, 17, 2)] + [("unresponsive", r) for r in range(1, 16, 2)] \
        == [(m.kind, m.rank) for m in s.named]


@pytest.mark.parametrize("text", ["", "{", "[]", '{"communicators": 3}', '{"communicators": [{"ranks": [{}]}]}',
                                  "SERVER PROTOCOL 2\nOK\n"])
def test_what_is_not_a_ras_status_is_an_answer_error(text: str) -> None:
    with pytest.raises(AnswerError):
        reduce_answer(text)
