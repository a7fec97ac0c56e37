"""The nccl_ras collector against a loopback RAS stand-in (real TCP) replaying answers in NCCL's layout."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from tests.helpers.catalog import assert_declared
from tests.helpers.metrics import registry_of
from tests.helpers.nccl_node import Node
from tests.helpers.net import free_port, wait_until
from tests.helpers.ras import RasStandIn
from trainmon import wire
from trainmon.catalog import nccl_ras
from trainmon.collectors.base import Collection
from trainmon.collectors.nccl_ras import NcclRasCollector
from trainmon.errors import CollectorError, NoData
from trainmon.settings import Address

RAS = Path(__file__).parents[1] / "fixtures" / "nccl" / "ras"
JOB = {"job_id": "llama"}


def answer(name: str) -> bytes:
    """A fixture whose rank with pid 4001 is this process, the hook's rank, so that the job is found."""
    return (RAS / name).read_bytes().replace(b'"pid": 4001,', f'"pid": {os.getpid()},'.encode())


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    n.report(rank=1)
    yield n
    n.close()


def ras_collector(node: Node, port: int, max_bytes: int = 8 << 20, deadline_s: float = 5.0,
                  poll_s: float = 60.0) -> NcclRasCollector:
    from dataclasses import replace

    settings = replace(node.settings, nccl_ras_addr=Address("127.0.0.1", port), nccl_ras_max_bytes=max_bytes)
    return NcclRasCollector(settings, node.resources, deadline_s=deadline_s, poll_s=poll_s)


def polled(c: NcclRasCollector) -> Collection:
    """Collect until the background poll has answered (collect() never waits for it)."""
    def done() -> Collection | None:
        try:
            return c.collect()
        except NoData:
            return None

    return wait_until(done)  # type: ignore[return-value]


def answered(node: Node, name: str, chunk: int = 1 << 20) -> Collection:
    """The collection once the stand-in has answered with the fixture `name`, `chunk` bytes a send."""
    ras = RasStandIn(answer(name), chunk=chunk)
    try:
        c = ras_collector(node, ras.port)
        collection = polled(c)
        c.close()
    finally:
        ras.close()
    return collection


def failure(c: NcclRasCollector) -> list[CollectorError]:
    """[the collector's failure], or [] while it has none (wait_until takes an exception for "not yet")."""
    try:
        c.collect()
    except NoData:
        return []
    except CollectorError as exc:
        return [exc]
    return []


def test_a_healthy_job_in_small_pieces_is_up_with_nothing_missing(node: Node) -> None:
    ras = RasStandIn(answer("status_healthy_16.json"), chunk=700)  # the answer arrives in many partial reads
    try:
        c = ras_collector(node, ras.port)
        reg = registry_of(polled(c).families)
        c.close()
    finally:
        ras.close()

    assert 1 == reg.get_sample_value("trainmon_nccl_ras_up", JOB)
    assert 0 == reg.get_sample_value("trainmon_nccl_ras_missing_ranks", {**JOB, "kind": "unresponsive"})
    assert 0 == reg.get_sample_value("trainmon_nccl_ras_communicators_mismatched", JOB)
    assert 16 == reg.get_sample_value("trainmon_nccl_ras_processes", JOB)
    assert 1 == reg.get_sample_value("trainmon_nccl_ras_info", {**JOB, "nccl_version": "2.30.7"})
    assert 1 == reg.get_sample_value("trainmon_nccl_ras_polls_total", {"command": "status", "result": "ok"})
    assert ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"] == ras.commands


def test_an_unresponsive_rank_and_a_mismatch_are_counted_per_job(node: Node) -> None:
    collection = answered(node, "status_unresponsive_16.json")
    reg = registry_of(collection.families)

    assert 1 == reg.get_sample_value("trainmon_nccl_ras_missing_ranks", {**JOB, "kind": "unresponsive"})
    assert 0 == reg.get_sample_value("trainmon_nccl_ras_missing_ranks", {**JOB, "kind": "dead"})
    assert 2 == reg.get_sample_value("trainmon_nccl_ras_communicators_mismatched", JOB)
    served = sum(len(f.samples) for f in collection.families)
    assert served < 20  # a few numbers per job, never a series per rank per communicator
    assert {family.name for family in nccl_ras.FAMILIES} == assert_declared(collection.families, "nccl_ras")


def test_an_answer_over_the_cap_fails_loudly_naming_the_flag(node: Node) -> None:
    ras = RasStandIn(answer("status_oversized_512.json"), chunk=4096)
    try:
        c = ras_collector(node, ras.port, max_bytes=256 << 10)
        error: CollectorError = cast(list[CollectorError], wait_until(lambda: failure(c)))[0]
        c.close()
    finally:
        ras.close()
    assert "over the cap of 262144 bytes (--nccl-ras-max-bytes)" in str(error)
    reg = registry_of(error.families)

    assert 1 == reg.get_sample_value("trainmon_nccl_ras_polls_total", {"command": "status", "result": "oversized"})
    assert 0 == reg.get_sample_value("trainmon_nccl_ras_up", JOB)


def test_the_oversized_answer_fits_the_default_cap(node: Node) -> None:
    reg = registry_of(answered(node, "status_oversized_512.json", chunk=65536).families)

    assert 512 == reg.get_sample_value("trainmon_nccl_ras_processes", JOB)


@pytest.mark.parametrize(("kwargs", "result"), [({"delay": 3.0}, "timeout"),
                                                ({"close_after_handshake": True}, "closed")])
def test_a_slow_or_vanishing_ras_is_down_for_the_hooks_job(node: Node, kwargs: dict[str, object],
                                                           result: str) -> None:
    ras = RasStandIn(answer("status_healthy_16.json"), **kwargs)  # type: ignore[arg-type]
    try:
        c = ras_collector(node, ras.port, deadline_s=1.0)
        collection = polled(c)
        c.close()
    finally:
        ras.close()
    reg = registry_of(collection.families)

    assert 0 == reg.get_sample_value("trainmon_nccl_ras_up", JOB)
    assert 1 == reg.get_sample_value("trainmon_nccl_ras_polls_total", {"command": "status", "result": result})
    assert reg.get_sample_value("trainmon_nccl_ras_missing_ranks", {**JOB, "kind": "dead"}) is None


def test_the_first_collection_waits_briefly_for_the_first_answer(node: Node) -> None:
    ras = RasStandIn(answer("status_healthy_16.json"))
    try:
        c = ras_collector(node, ras.port)
        reg = registry_of(c.collect().families)  # not NoData: `trainmon check` shows what RAS says
        c.close()
    finally:
        ras.close()

    assert 1 == reg.get_sample_value("trainmon_nccl_ras_up", JOB)


def test_a_connection_closed_instead_of_an_answer_is_closed_not_malformed(node: Node) -> None:
    ras = RasStandIn(b"")
    try:
        c = ras_collector(node, ras.port)
        reg = registry_of(polled(c).families)
        c.close()
    finally:
        ras.close()

    assert 1 == reg.get_sample_value("trainmon_nccl_ras_polls_total", {"command": "status", "result": "closed"})


def test_nothing_listening_is_refused(node: Node) -> None:
    c = ras_collector(node, free_port())
    reg = registry_of(polled(c).families)
    c.close()

    assert 1 == reg.get_sample_value("trainmon_nccl_ras_polls_total", {"command": "status", "result": "refused"})
    assert 0 == reg.get_sample_value("trainmon_nccl_ras_up", JOB)


def test_a_suspected_hang_asks_verbose_status_once_then_status_again(node: Node) -> None:
    node.report(rank=1, seq=2, inflight=(wire.Inflight(group="default_pg", op="all_reduce",
                                                       since=time.time() - 400),))
    ras = RasStandIn(answer("status_healthy_16.json"))
    try:
        c = ras_collector(node, ras.port, poll_s=0.0)
        wait_until(lambda: c.collect() and ras.commands.count("STATUS") >= 2)
        c.close()
    finally:
        ras.close()

    status = [cmd for cmd in ras.commands if cmd.endswith("STATUS")]
    assert "VERBOSE STATUS" == status[0]
    assert 1 == status.count("VERBOSE STATUS")


def test_a_rank_the_hook_suspects_asks_verbose_status_once_per_episode(node: Node) -> None:
    """The hook's own suspicion (30 s floor, 5x the median step) is enough: no 5 minutes in flight needed."""
    since = time.time() - 40
    op = (wire.Inflight(group="default_pg", op="all_reduce", since=since),)
    node.report(rank=1, seq=2, inflight=op, hang_suspected=1)
    ras = RasStandIn(answer("status_healthy_16.json"))
    try:
        c = ras_collector(node, ras.port, poll_s=0.0)
        wait_until(lambda: c.collect() and ras.commands.count("STATUS") >= 2)
        assert ["VERBOSE STATUS", "STATUS"] == [cmd for cmd in ras.commands if cmd.endswith("STATUS")][:2]
        node.report(rank=1, seq=3)  # the collective completed: the episode ends
        seen = len(ras.commands)
        wait_until(lambda: c.collect() and "STATUS" in ras.commands[seen:])
        node.report(rank=1, seq=4, inflight=op, hang_suspected=1)  # a second episode
        wait_until(lambda: c.collect() and ras.commands.count("VERBOSE STATUS") == 2)
        seen = len(ras.commands)
        wait_until(lambda: c.collect() and ras.commands[seen:].count("STATUS") >= 2)  # still suspected: STATUS
        c.close()
    finally:
        ras.close()

    assert 2 == ras.commands.count("VERBOSE STATUS")


def test_a_lost_nodes_dead_ranks_are_named_with_their_host(node: Node) -> None:
    collection = answered(node, "status_dead_16.json")
    reg = registry_of(collection.families)

    assert 8 == reg.get_sample_value("trainmon_nccl_ras_missing_ranks", {**JOB, "kind": "dead"})
    named = {(s.labels["rank"], s.labels["kind"], s.labels["host"]) for f in collection.families for s in f.samples
             if s.name == "trainmon_nccl_ras_missing_rank_info"}
    assert {*((str(r), "dead", "10.0.0.2") for r in range(8, 16)), ("6", "unresponsive", "10.0.0.1")} == named
    assert all(s.labels["job_id"] == "llama" for f in collection.families for s in f.samples
               if s.name == "trainmon_nccl_ras_missing_rank_info")
