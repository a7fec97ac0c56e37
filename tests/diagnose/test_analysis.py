"""trainmon.diagnose.analysis: findings ranked by the share of the job's time they cost (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from trainmon.diagnose.analysis import Thresholds, diagnose, hang_culprit
from trainmon.diagnose.model import Hardware, MountSignals, Rank, RankStack
from trainmon.diagnose.report import render

NODE_A, NODE_B = "a:9842", "b:9842"


def rank(r: int, instance: str = NODE_A, **values: object) -> Rank:
    """A rank over 100 s: 100 steps of 0.9 s compute, nothing else, unless `values` say otherwise."""
    base: dict[str, object] = {"seconds": 100.0, "steps": 100.0, "step_seconds": 90.0, "uuid": f"GPU-{r}"}
    return Rank(rank=r, instance=instance, **{**base, **values})  # type: ignore[arg-type]


def test_goodput_is_never_over_one_when_the_windows_extrapolate_compute_past_the_ranks_time() -> None:
    """Seen in a CI run: 1.006 from two increase() queries over the same 15 s."""
    result = diagnose("j", "15s", [rank(0, step_seconds=100.6), rank(1, step_seconds=100.6)], [])

    assert 1.0 == result.goodput


def test_a_healthy_job_has_no_findings_and_its_goodput() -> None:
    result = diagnose("j", "1h", [rank(0), rank(1)], [])

    assert ((), 0.9, None) == (result.findings, result.goodput, result.mfu)
    assert {"job_id": "j", "since": "1h", "findings": [], "mfu": None, "goodput": 0.9} == result.as_dict()


def test_a_straggler_costs_its_peers_wait_and_that_wait_is_not_called_communication() -> None:
    """Rank 1 computes 0.9 s per step, rank 0 0.3 s and waits 0.6 s for it in the all-reduce."""
    ranks = [rank(0, step_seconds=90.0, comm_wait=60.0), rank(1, NODE_B)]
    throttle = Hardware("throttle", NODE_B, "GPU-1")
    result = diagnose("j", "1h", ranks, [throttle, Hardware("nvme_latency", NODE_B, "nvme0n1"),
                                         Hardware("xid", NODE_A, "GPU-0")])

    assert ["straggler"] == [f.cause for f in result.findings]
    straggler = result.findings[0]
    assert (1, NODE_B, "GPU-1", 0.3) == (straggler.rank, straggler.instance, straggler.uuid, round(straggler.share, 6))
    assert (throttle, Hardware("nvme_latency", NODE_B, "nvme0n1")) == straggler.hardware  # its node only
    assert "score 0.33" in straggler.detail


def test_ranks_within_the_threshold_are_not_stragglers() -> None:
    ranks = [rank(0, step_seconds=70.0, comm_wait=0.0), rank(1)]  # score 0.78

    assert [] == [f for f in diagnose("j", "1h", ranks, []).findings if f.cause == "straggler"]


def test_causes_are_ordered_by_share_and_small_ones_left_out() -> None:
    ranks = [rank(0, step_seconds=60.0, comm_wait=20.0, data_wait=5.0, phases={"checkpoint": 30.0, "eval": 4.0}),
             rank(1, step_seconds=60.0, comm_wait=20.0, data_wait=5.0, phases={"checkpoint": 30.0, "eval": 4.0})]

    result = diagnose("j", "1h", ranks, [Hardware("ib_errors", NODE_A, "mlx5_0/1")])

    assert [("phase", 0.3), ("communication", 0.2)] == [(f.cause, round(f.share, 3)) for f in result.findings]
    assert "checkpoint" == result.findings[0].phase
    assert [{"signal": "ib_errors", "instance": NODE_A, "device": "mlx5_0/1"}] == \
        result.as_dict()["findings"][1]["hardware"]  # type: ignore[index]


def test_a_stalled_rank_out_of_a_phase_is_found_however_small_and_one_in_a_phase_is_not() -> None:
    ranks = [rank(0, since_last_step=1000.0, seconds=3600.0), rank(1, since_last_step=1000.0, in_phase=True,
                                                                   seconds=3600.0)]

    stalls = [f for f in diagnose("j", "1h", ranks, []).findings if f.cause == "stall"]

    assert [(0, round(1000 / 7200, 4))] == [(f.rank, round(f.share, 4)) for f in stalls]


def test_a_collective_in_flight_past_the_threshold_is_a_hang() -> None:
    ranks = [rank(0, inflight=400.0, seconds=1000.0), rank(1, seconds=1000.0)]

    result = diagnose("j", "1h", ranks, [], Thresholds(hang_seconds=300))

    assert [("hang", 0.2)] == [(f.cause, f.share) for f in result.findings if f.cause == "hang"]


def test_mfu_counts_only_ranks_with_flops_and_a_known_peak() -> None:
    ranks = [rank(0, model_flops=100 * 400e12, peak_flops=1000e12), rank(1, model_flops=100 * 900e12),
             rank(2, peak_flops=1000e12)]

    result = diagnose("j", "1h", ranks, [])

    assert 0.4 == result.mfu
    assert 0.4 == json.loads(json.dumps(result.as_dict()))["mfu"]


def test_no_time_at_all_is_nothing_found() -> None:
    result = diagnose("j", "1h", [rank(0, seconds=0.0)], [])

    assert ((), None, None) == (result.findings, result.goodput, result.mfu)


def test_a_rank_that_starts_after_now_counts_for_no_time_and_no_mfu() -> None:
    """Its process start time is past `now` (a node's clock ahead): no time in the window, and MFU from none."""
    ranks = [rank(0, seconds=0.0, steps=0.0, step_seconds=0.0, model_flops=1e15, peak_flops=989e12), rank(1)]

    result = diagnose("j", "1h", ranks, [])

    assert (None, 0.9) == (result.mfu, result.goodput)


def slow_mount(instance: str = NODE_A, **values: float) -> MountSignals:
    """A Lustre mount whose RPCs took 1 ms in the window before and `rpc_latency` now (default 12 ms)."""
    base = {"read_rate": 2e9, "read_rate_before": 2e9, "rpc_latency": 0.012, "rpc_latency_before": 0.001,
            "metadata_rate": 40.0, "metadata_rate_before": 40.0}
    return MountSignals(instance=instance, mount="/lustre/scratch", **{**base, **values})


def test_data_wait_beside_a_mount_that_slowed_is_storage_with_the_mount_and_its_signals() -> None:
    ranks = [rank(0, data_wait=30.0, step_seconds=90.0), rank(1, NODE_B, data_wait=30.0, step_seconds=90.0)]
    mount = slow_mount(NODE_B, read_rate=0.5e9, timeouts=4.0)

    result = diagnose("j", "1h", ranks, [], mounts=[mount, slow_mount("elsewhere:9842")])

    (finding,) = result.findings
    assert ("storage", "/lustre/scratch", NODE_B, 0.3) == (finding.cause, finding.mount, finding.instance,
                                                           finding.share)
    assert {"rpc_latency_seconds": 0.012, "rpc_latency_before_seconds": 0.001, "rpc_timeouts": 4.0,
            "read_throughput_drop": 0.75} == finding.signals
    assert [{"signal": "fs_latency", "instance": NODE_B, "device": "/lustre/scratch"}] == \
        json.loads(json.dumps(result.as_dict()))["findings"][0]["hardware"]  # not the mount of another job's node


def test_data_wait_on_a_fast_local_tier_stays_data_loading() -> None:
    """Mounts as fast as before, or only a 1.5x latency wobble: the input pipeline itself."""
    ranks = [rank(0, data_wait=30.0, step_seconds=90.0)]

    result = diagnose("j", "1h", ranks, [], mounts=[slow_mount(rpc_latency=0.0015)])

    assert ["data_loading"] == [f.cause for f in result.findings]


def test_a_metadata_storm_alone_is_storage() -> None:
    ranks = [rank(0, data_wait=30.0, step_seconds=90.0)]

    result = diagnose("j", "1h", ranks, [], mounts=[slow_mount(rpc_latency=0.001, metadata_rate=900.0)])

    assert {"metadata_ops_per_second": 900.0} == result.findings[0].signals


def test_a_slow_mount_under_a_communication_bound_job_is_not_blamed() -> None:
    """The job waits on its peers, not on data: a slow mount on its node does not make it storage."""
    ranks = [rank(0, comm_wait=50.0), rank(1, NODE_B, comm_wait=50.0)]

    result = diagnose("j", "1h", ranks, [], mounts=[slow_mount()])

    assert ["communication"] == [f.cause for f in result.findings]


def test_a_gpu_health_verdict_on_the_stragglers_node_is_listed_with_it() -> None:
    ranks = [rank(0, step_seconds=90.0, comm_wait=60.0), rank(1, NODE_B)]
    verdict = Hardware("health", NODE_B, "GPU-1")
    result = diagnose("j", "1h", ranks, [verdict, Hardware("health", NODE_A, "GPU-0")])

    assert (verdict,) == result.findings[0].hardware
    findings = json.loads(json.dumps(result.as_dict()))["findings"]
    assert {"signal": "health", "instance": NODE_B, "device": "GPU-1"} == findings[0]["hardware"][0]


def job_of(n: int, **per_rank: Mapping[str, object]) -> list[Rank]:
    """`n` ranks on nodes of 8, each 100 steps of 0.9 s compute; `per_rank["3"]` changes rank 3."""
    return [rank(r, f"n{r // 8}:9842", **per_rank.get(str(r), {})) for r in range(n)]


def test_one_gpu_5_percent_slow_of_64_is_a_slow_rank_with_its_own_gpus_hardware() -> None:
    """BLOOM-176B: rank 37 computes 0.945 s, the others 0.9 s (and wait 0.045 s for it)."""
    ranks = job_of(64, **{str(r): {"step_seconds": 94.5, "comm_wait": 4.5} for r in range(64) if r != 37})
    ranks[37] = rank(37, "n4:9842", step_seconds=94.5)
    hardware = [Hardware("power_cap", "n4:9842", "GPU-37"), Hardware("throttle", "n4:9842", "GPU-36"),
                Hardware("pcie_link", "n4:9842", "GPU-37")]

    result = diagnose("bloom", "1h", ranks, hardware)

    (slow,) = [f for f in result.findings if f.cause == "slow_rank"]
    assert (37, "n4:9842", "GPU-37") == (slow.rank, slow.instance, slow.uuid)
    assert (Hardware("power_cap", "n4:9842", "GPU-37"), Hardware("pcie_link", "n4:9842", "GPU-37")) == slow.hardware
    assert "5.0% over the median" in slow.detail
    assert "straggler" not in [f.cause for f in result.findings]


def test_ranks_that_differ_by_noise_have_no_slow_rank() -> None:
    ranks = job_of(64, **{str(r): {"step_seconds": 90.0 + (r % 5) * 0.05} for r in range(64)})

    assert [] == [f for f in diagnose("j", "1h", ranks, []).findings if f.cause == "slow_rank"]


def test_a_spike_on_every_rank_without_hardware_signals_is_instability_with_its_ranks_and_steps() -> None:
    spiked = {"grad_norm_spikes": 3.0, "loss_spikes": 1.0, "spike_steps": (1200.0, 1260.0)}
    ranks = job_of(4, **{str(r): spiked for r in range(4)})

    result = diagnose("j", "1h", ranks, [Hardware("ib_errors", "n0:9842", "mlx5_0/1")])

    (finding,) = result.findings
    assert {"cause": "instability", "share": 0.0, "ranks": [0, 1, 2, 3], "step_window": [1200, 1260],
            "hardware": [], "suggestion": finding.suggestion} == finding.as_dict()
    assert "no hardware signal" in finding.detail


def test_a_spike_with_a_gpu_signal_on_the_jobs_nodes_says_to_check_the_hardware_first() -> None:
    ranks = job_of(4, **{str(r): {"grad_norm_spikes": 1.0} for r in range(4)})

    (finding,) = diagnose("j", "1h", ranks, [Hardware("xid", "n0:9842", "GPU-2")]).findings

    assert (finding.cause, finding.hardware) == ("instability", (Hardware("xid", "n0:9842", "GPU-2"),))
    assert "check them first" in finding.detail


def test_a_spike_on_one_rank_only_suspects_silent_data_corruption_on_its_gpu() -> None:
    ranks = job_of(8, **{"5": {"grad_norm_spikes": 2.0, "spike_steps": (300.0, 310.0)}})

    result = diagnose("j", "1h", ranks, [])

    (finding,) = result.findings
    assert (finding.cause, finding.rank, finding.uuid) == ("silent_data_corruption", 5, "GPU-5")
    assert "suspect silent data corruption on GPU GPU-5" in finding.detail
    assert "dcgmi diag -r 3" in finding.suggestion
    assert "dcgmi diag -r 3" in render(result)


def test_a_stragglers_evidence_is_its_own_gpu_and_node_and_the_rest_is_listed_apart() -> None:
    """Issue 41: a corrected ECC on GPU 2 and application XIDs on GPUs 3 and 6 of the straggler's node were
    listed as its evidence; they are now under "elsewhere on the job's nodes", with another node's signals."""
    ranks = [rank(0, step_seconds=90.0, comm_wait=60.0), rank(1, NODE_B)]
    own = (Hardware("ib_errors", NODE_B, "mlx5_0/1"), Hardware("throttle", NODE_B, "GPU-1"))
    elsewhere = (Hardware("ecc", NODE_B, "GPU-2"), Hardware("xid", NODE_B, "GPU-3"), Hardware("xid", NODE_B, "GPU-6"),
                 Hardware("xid", NODE_A, "GPU-0"))
    result = diagnose("j", "1h", ranks, [*own, *elsewhere])

    straggler = result.findings[0]
    assert ("straggler", own, elsewhere) == (straggler.cause, straggler.hardware, straggler.elsewhere)
    as_json = json.loads(json.dumps(result.as_dict()))["findings"][0]
    assert [h.as_dict() for h in own] == as_json["hardware"]
    assert [h.as_dict() for h in elsewhere] == as_json["hardware_elsewhere"]
    report = render(result).splitlines()
    heading = report.index("   elsewhere on the job's nodes (not this GPU's or node's):")
    assert ["   hardware on b:9842: ib_errors mlx5_0/1", "   hardware on b:9842: throttle GPU-1"] == \
        report[heading - 2:heading]
    assert ["     b:9842: ecc GPU-2", "     b:9842: xid GPU-3", "     b:9842: xid GPU-6",
            "     a:9842: xid GPU-0"] == report[heading + 1:heading + 5]


def test_a_node_whose_ranks_wait_for_data_is_named_with_its_drive_and_its_waiting_peers_are_no_stragglers() -> None:
    """One node's NVMe collapsed: its 2 ranks wait 95 of every 100 s for data (their compute reads 0), the 10 ranks
    of the other 5 nodes wait for them in collectives. The node is the finding, with its own slow drive."""
    nodes = [f"n{i}:9842" for i in range(6)]
    bound = nodes[3]
    ranks = [rank(2 * i + j, node, step_seconds=100.0,
                  **({"data_wait": 95.0, "comm_wait": 5.0} if node == bound else {"comm_wait": 70.0}))
             for i, node in enumerate(nodes) for j in range(2)]
    slow_drive = Hardware("nvme_latency", bound, "nvme1n1")

    result = diagnose("j", "1h", ranks, [slow_drive, Hardware("nvme_latency", nodes[0], "nvme0n1")])

    assert ["data_loading"] == [f.cause for f in result.findings]
    (finding,) = result.findings
    assert (bound, (6, 7), (slow_drive,)) == (finding.instance, finding.ranks, finding.hardware)
    assert round(finding.share, 4) == round((2 * 95 + 10 * 70) / 1200, 4)


def test_a_job_that_waits_for_data_everywhere_is_one_job_wide_finding() -> None:
    ranks = [rank(0, data_wait=30.0, step_seconds=90.0), rank(1, NODE_B, data_wait=30.0, step_seconds=90.0)]

    (finding,) = diagnose("j", "1h", ranks, [Hardware("nvme_latency", NODE_B, "nvme0n1")]).findings

    assert ("data_loading", None) == (finding.cause, finding.instance)


def test_a_degraded_infiniband_port_is_evidence_of_communication_wait() -> None:
    ranks = [rank(0, comm_wait=50.0), rank(1, NODE_B, comm_wait=50.0)]
    degraded = Hardware("ib_degraded", NODE_B, "mlx5_2/1")

    result = diagnose("j", "1h", ranks, [degraded])

    assert [("communication", (degraded,))] == [(f.cause, f.hardware) for f in result.findings]



def four(slow: Mapping[int, float], tokens: Mapping[int, float] | None = None,
         stages: Mapping[int, int] | None = None, *, reported: bool = True) -> list[Rank]:
    """Four ranks of 100 steps computing 0.5 s each (`slow`: rank -> compute per step), every step as long as the
    slowest rank's, the rest waiting in communication; 1,000 real tokens a step unless `tokens` says otherwise, none
    unless `reported`."""
    slowest = max(slow.values(), default=0.5)
    return [rank(r, step_seconds=100.0 * slowest, comm_wait=100.0 * (slowest - slow.get(r, 0.5)),
                 tokens=100.0 * (tokens or {}).get(r, 1000.0) if reported else 0.0,
                 pipeline_stage=(stages or {}).get(r)) for r in range(4)]


def cause_of(ranks: list[Rank]) -> list[tuple[str, int | None, str | None, float]]:
    return [(f.cause, f.rank, f.straggler_cause, round(f.recoverable_share or 0.0, 6))
            for f in diagnose("j", "1h", ranks, []).findings if f.cause in {"straggler", "slow_rank"}]


def test_a_rank_slower_on_the_same_tokens_is_hardware_even_among_declared_stages() -> None:
    """Rank 3 computes 0.8 s a step on the tokens its peers do in 0.5 s; rank 2, of its stage, is not slow. Without
    it every step would be 0.3 s shorter, of 0.8 s."""
    assert [("straggler", 3, "hardware", 0.375)] == cause_of(four({3: 0.8}, stages={0: 0, 1: 0, 2: 1, 3: 1}))


def test_a_rank_given_three_times_the_tokens_is_data_imbalance() -> None:
    assert [("straggler", 3, "data_imbalance", 0.666667)] == cause_of(four({3: 1.5}, tokens={3: 3000.0}))


def test_a_slow_stage_is_pipeline_stage_on_each_of_its_ranks() -> None:
    """Stage 1 computes 0.8 s a step, stage 0 0.5 s: 0.15 s over the median rank (0.65 s), of 0.8 s."""
    found = cause_of(four({2: 0.8, 3: 0.8}, stages={0: 0, 1: 0, 2: 1, 3: 1}))

    assert [("straggler", 2, "pipeline_stage", 0.1875), ("straggler", 3, "pipeline_stage", 0.1875)] == sorted(found)


def test_a_cause_that_explains_less_than_most_of_the_excess_is_unknown() -> None:
    """1.5x the tokens and 3x the compute: the tokens explain 37% of it, the time per token 63%."""
    assert ["unknown"] == [c for _, _, c, _ in cause_of(four({3: 1.5}, tokens={3: 1500.0}))]


def test_without_tokens_or_stages_the_cause_is_unknown_in_json_and_text() -> None:
    result = diagnose("j", "1h", four({3: 0.8}, reported=False), [])
    straggler = result.as_dict()["findings"][0]  # type: ignore[index]

    assert ("unknown", 0.375) == (straggler["straggler_cause"], straggler["recoverable_share"])
    assert "straggler cause: unknown; recoverable without it: 38% of the job's step time" in render(result)


def test_a_healthy_job_names_no_cause() -> None:
    result = diagnose("j", "1h", four({}, stages={0: 0, 1: 0, 2: 1, 3: 1}), [])

    assert ((), "straggler cause" in render(result)) == (result.findings, False)


STACK = ("/job/data.py:9:next_batch", "/site/trainmon/torch/_monitor.py:266:_timed", "/job/train.py:40:main")


def hung_job(where: dict[int, str], signatures: dict[int, str], issued: dict[int, float],
             **per_rank: Mapping[str, object]) -> list[Rank]:
    """Four ranks on two nodes, each suspected of a hang `where` it is stuck."""
    return [rank(r, NODE_A if r < 2 else NODE_B, hung=where[r], signature=signatures.get(r, ""),
                 issued={"default_pg": issued.get(r, 10.0)}, inflight=40.0, **per_rank.get(str(r), {}))
            for r in range(4)]


def test_a_hung_job_names_its_class_and_culprit_with_its_stack_group_and_timeout_left() -> None:
    ranks = hung_job({0: "collective", 1: "collective", 2: "data", 3: "collective"}, {0: "a", 1: "a", 2: "b", 3: "a"},
                     {2: 9.0}, **{str(r): {"timeout_left": 600.0 - 40 - r} for r in range(4)})
    stacks = {2: RankStack(stack=STACK, group_ranks={"default_pg": "0-3"}, in_flight=())}

    finding = next(f for f in diagnose("j", "1h", ranks, [], stacks=stacks).findings if f.cause == "hang")
    out = finding.as_dict()

    assert ("data", 2, NODE_B, "GPU-2") == (out["class"], out["rank"], out["instance"], out["uuid"])
    assert list(STACK) == out["stack"]
    assert [{"signature": "a", "ranks": [0, 1, 3]}, {"signature": "b", "ranks": [2]}] == out["stack_groups"]
    assert [{"rank": 2, "instance": NODE_B, "uuid": "GPU-2"}] == out["outliers"]
    assert ("default_pg", "0-3", 557.0) == (out["group"], out["group_ranks"], out["nccl_timeout_left_seconds"])
    text = render(diagnose("j", "1h", ranks, [], stacks=stacks))
    assert "class: data" in text and "stack of rank 2 (innermost first):\n     /job/data.py:9:next_batch" in text
    assert "trainmonjobhung" in text
    json.dumps(out, allow_nan=False)


def test_each_class_and_culprit_as_the_alert_decides() -> None:
    collective = dict.fromkeys(range(4), "collective")
    cases = [
        (hung_job({**collective, 1: "other"}, {0: "a", 1: "b", 2: "a", 3: "a"}, {1: 9.0}), ("host", 1)),
        (hung_job(collective, {0: "a", 1: "b", 2: "a", 3: "a"}, {1: 9.0}), ("host", 1)),  # waits in another one
        (hung_job(collective, {0: "a", 1: "a", 2: "a", 3: "c"}, {}), ("collective", 3)),
        (hung_job({**collective, 0: "gone"}, {1: "a", 2: "a", 3: "a"}, {}), ("gone", 0)),
        (hung_job(dict.fromkeys(range(4), "other"), {0: "a", 1: "a", 2: "b", 3: "a"}, {}), ("unknown", 2)),
    ]

    assert [expected for _, expected in cases] == [
        (found[0], found[1].rank) for ranks, _ in cases if (found := hang_culprit(ranks)) is not None]


def test_no_hang_while_one_rank_is_not_suspected_or_every_rank_is_gone() -> None:
    collective = dict.fromkeys(range(4), "collective")
    one_steps = [*hung_job(collective, {}, {})[:3], rank(3, NODE_B)]

    assert hang_culprit(one_steps) is None
    assert hang_culprit(hung_job(dict.fromkeys(range(4), "gone"), {}, {})) is None


def test_the_flight_recorders_dump_is_named_where_the_job_runs_it() -> None:
    env = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/shared/fr/rank_"}
    ranks = hung_job({0: "collective", 1: "other", 2: "collective", 3: "collective"}, {}, {1: 9.0},
                     **{"1": {"nccl_env": env}})

    finding = next(f for f in diagnose("j", "1h", ranks, []).findings if f.cause == "hang")

    assert f"/shared/fr/rank_1 on {NODE_A}" == finding.as_dict()["flight_recorder"]
    assert "the culprit's stack was not available" in finding.detail
