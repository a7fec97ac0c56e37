"""Wire format v1: round trips, and every kind of bad datagram rejected with its reason."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmon import wire
from trainmon.errors import MessageRejected

FULL = wire.Report(
    job_id="llama-8b", rank=3, pid=4242, start_time=1_767_000_000.0, seq=17, sent_at=1_767_000_042.0,
    local_rank=3, world_size=8, uuid="GPU-abc", backend="nccl", framework="ddp", loss_scaler="torch_amp",
    steps=10, samples=320, tokens=655_360, step_buckets=(0, 1, 2, *(10,) * 11), step_seconds_sum=12.5,
    last_step=1_767_000_041.5, phase="checkpoint", comm_wait=1.5, data_wait=0.25,
    collectives=(wire.Collective(op="all_reduce", group="default_pg", seconds=2.0, calls=40, bytes=1 << 30),),
    group_sizes={"default_pg": 8}, loss_scale=65536.0, skipped_steps=1, loss=2.31, grad_norm=0.9,
    nonfinite_losses=0, nccl_env={"NCCL_ALGO": "Ring"}, parallel={"tp": 2, "dp": 4},
    cuda_alloc_retries=0, cuda_ooms=0, pod="trainer-3", namespace="ml", first_step=1_767_000_001.0,
    model_flops=1.5e15, phase_seconds={"checkpoint": 3.0}, hook_errors={"send_drops": 2},
    group_seqs=(wire.GroupSeq("default_pg", 40, 39),), inflight=(wire.Inflight("default_pg", "all_reduce", 1.7e9),),
    inflight_age={"default_pg": 12.5}, microbatches=40, pipeline_stage=1,
)
MINIMAL = {"v": 1, "type": "report", "job_id": "j", "rank": 0, "pid": 1, "start_time": 1.0, "seq": 0}


def test_round_trip_keeps_every_field() -> None:
    assert FULL == wire.decode(wire.encode(FULL))


def test_minimal_message_leaves_unknown_values_absent() -> None:
    report = wire.decode(json.dumps(MINIMAL).encode())

    assert (None, None, 0, "none") == (report.loss_scale, report.last_step, report.steps, report.loss_scaler)


def test_unknown_fields_are_ignored() -> None:
    """A newer hook may add fields; this daemon still reads the ones it knows."""
    report = wire.decode(json.dumps({**MINIMAL, "steps": 5, "gpu_temperature": 80, "info": {"future": 1}}).encode())

    assert 5 == report.steps


def test_non_finite_loss_survives_the_wire() -> None:
    report = wire.decode(wire.encode(wire.Report(job_id="j", rank=0, pid=1, start_time=1.0, seq=1, loss=math.nan)))

    assert report.loss is not None and math.isnan(report.loss)


def bad(**changes: object) -> bytes:
    return json.dumps({**MINIMAL, **changes}).encode()


@pytest.mark.parametrize(("data", "reason"), [
    (b"x" * (wire.MAX_DATAGRAM + 1), "oversized"),
    (b"{not json", "malformed"),
    (wire.encode(FULL)[:100], "malformed"),  # truncated
    (b"\xff\xfe", "malformed"),
    (b"[1, 2]", "malformed"),
    (bad(v=2), "version"),
    (bad(v="1"), "version"),
    (bad(v=True), "version"),
    (json.dumps({k: v for k, v in MINIMAL.items() if k != "pid"}).encode(), "schema"),
    (bad(rank="0"), "schema"),
    (bad(rank=True), "schema"),
    (bad(steps=1.5), "schema"),
    (bad(info=[]), "schema"),
    (bad(collectives=[["all_reduce", "g", 1.0, 1]]), "schema"),
    (bad(step_hist={"buckets": [1, 2]}), "schema"),
    (bad(rank=-2), "range"),
    (bad(steps=1 << 70), "range"),
    (bad(comm_wait=-1.0), "range"),
    (bad(start_time=1e300), "range"),
    (bad(job_id=""), "range"),
    (bad(job_id="x" * 200), "range"),
    (bad(job_id="a\nb"), "range"),
    (bad(type="hello"), "range"),
    (bad(collectives=[["allreduce", "g", 1.0, 1, 1]]), "range"),
    (bad(collectives=[["all_reduce", f"g{i}", 1.0, 1, 1] for i in range(10)]), "range"),
    (bad(step_hist={"buckets": [2, 1, *(1,) * 12]}), "range"),
    (bad(nccl_env={"PATH": "/bin"}), "range"),
    (bad(nccl_env={f"NCCL_{i}": "1" for i in range(33)}), "range"),
    (bad(parallel={"zz": 1}), "range"),
    (bad(info={"loss_scaler": "apex"}), "range"),
    (bad(loss=10**400), "range"),  # float() of it raises OverflowError
    (bad(comm_wait=10**400), "range"),
    (bad(start_time=10**400), "range"),
    (bad(collectives=[["all_reduce", "g", 10**400, 1, 1]]), "range"),
    (bad(seq=1 << 40), "range"),
    (bad(nccl_env={"NCCL_\ud800": "1"}), "range"),
    (bad(nccl_env={"NCCL_A\u2028": "1"}), "range"),
    (bad(nccl_env={"NCCL_A": "x\x00"}), "range"),
    (bad(group_sizes={"g\x1b": 1}), "range"),
    (bad(info={"pod": "a\rb"}), "range"),
    (bad(phase_seconds={"\ud800": 1.0}), "range"),
    (bad(hook_errors={"not an identifier": 1}), "range"),
    (bad(hook_errors={f"k{i}": 1 for i in range(9)}), "range"),
    (bad(collectives=[["all_reduce", "g", 1.0, 1, 1], ["all_reduce", "g", 2.0, 2, 2]]), "schema"),
    (bad(groups=[["g", 1, 1], ["g", 2, 2]]), "schema"),
    (bad(inflight=[["g", "all_reduce", 1.0], ["g", "barrier", 2.0]]), "schema"),
    (bad(inflight=[["g", "allreduce", 1.0]]), "range"),
    (bad(inflight_age={"g": -1.0}), "range"),
    (bad(inflight_age={f"g{i}": 1.0 for i in range(10)}), "range"),
    (bad(inflight_age=[["g", 1.0]]), "schema"),
    (bad(exit_reason="crashed"), "range"),
    (bad(info={"pod": 1}), "schema"),
    (bad(microbatches=-1), "range"),
    (bad(info={"pipeline_stage": -1}), "range"),
    (bad(info={"pipeline_stage": "0"}), "schema"),
])
def test_bad_datagrams_are_rejected_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(MessageRejected) as caught:
        wire.decode(data)

    assert reason == caught.value.reason


FIELDS = st.sampled_from([*sorted(MINIMAL), "info", "collectives", "step_hist", "nccl_env", "steps"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(FIELDS, inner, max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512) | JSON.map(lambda v: json.dumps(v).encode()) | st.fixed_dictionaries(
    {k: st.just(v) for k, v in MINIMAL.items()}, optional={"steps": JSON, "info": JSON, "collectives": JSON},
).map(lambda v: json.dumps(v).encode()))
def test_any_bytes_either_decode_or_are_rejected(data: bytes) -> None:
    """Nothing a sender can put in a datagram makes decode raise anything but MessageRejected."""
    try:
        wire.decode(data)
    except MessageRejected as exc:
        reason = exc.reason
    else:
        return
    assert reason in wire.REJECT_REASONS


def test_a_counter_lower_than_in_the_previous_report_is_named() -> None:
    later = dataclasses.replace(FULL, seq=18, steps=11)

    assert None is wire.went_backwards(later, FULL)
    assert "steps" == wire.went_backwards(dataclasses.replace(later, steps=9), FULL)
    assert "groups" == wire.went_backwards(dataclasses.replace(later, group_seqs=(wire.GroupSeq("default_pg", 40, 1),)),
                                           FULL)
    assert "phase_seconds" == wire.went_backwards(dataclasses.replace(later, phase_seconds={"checkpoint": 1.0}), FULL)


def test_every_report_attribute_is_in_the_schema_table() -> None:
    """One table: a Report attribute without a FIELDS row would never reach the wire."""
    assert {f.name for f in dataclasses.fields(wire.Report)} == {f.attr for f in wire.FIELDS}
