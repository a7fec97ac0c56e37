"""`trainmon demo`'s own flags make its `Plan`; `Settings` knows nothing of incidents."""

from __future__ import annotations

import dataclasses

import pytest

from trainmon.demo.options import DEMO_OPTIONS, plan_from
from trainmon.errors import ConfigError
from trainmon.settings import Settings
from trainmon.simulation.incidents import Plan


def test_no_demo_options_are_the_plans_defaults_and_settings_has_no_field_of_them() -> None:
    plan = plan_from({})

    default = Plan()
    assert (default.incident, default.after, default.checkpoint_every) == (plan.incident, plan.after,
                                                                           plan.checkpoint_every)
    demo_only = {"simulated", "simulated_pids", *(o.field_name for o in DEMO_OPTIONS)}
    assert set() == demo_only & {f.name for f in dataclasses.fields(Settings)}


def test_the_demo_options_become_the_plan() -> None:
    plan = plan_from({"incident": "gpu-lost", "incident_after": "2.5", "checkpoint_every": "24"})

    assert ("gpu-lost", 2.5, 24.0) == (plan.incident, plan.after, plan.checkpoint_every)


def test_a_shorter_checkpoint_period_compresses_the_whole_schedule() -> None:
    """The default: first checkpoint 20 s after start, 8 s long, every 2 minutes; a fifth of the period, a fifth
    of each."""
    def phases(plan: Plan, seconds: list[float]) -> list[bool]:
        return [plan.checkpointing(t) for t in seconds]

    default = [19.5, 20.5, 27.5, 28.5, 139.5, 140.5, 147.5, 148.5]
    expected = [False, True, True, False, False, True, True, False]

    assert expected == phases(Plan(), default)
    assert expected == phases(Plan(checkpoint_every=24), [t / 5 for t in default])


def test_checkpoints_begun_counts_windows_a_late_tick_would_miss() -> None:
    """The job takes a checkpoint whose 1.6 s window fell between two ticks of a loaded machine."""
    plan = Plan(checkpoint_every=24)

    assert [0, 1, 1, 2, 2, 3] == [plan.checkpoints_begun(t) for t in (3.9, 4.0, 27.9, 28.0, 51.9, 52.0)]
    assert not plan.checkpointing(6.0) and plan.checkpoints_begun(6.0) == 1  # past the window, still begun


@pytest.mark.parametrize(("values", "flag"), [({"incident": "fire"}, "--incident='fire'"),
                                              ({"incident_after": "-1"}, "--incident-after='-1'"),
                                              ({"checkpoint_every": "0"}, "--checkpoint-every='0'")])
def test_a_bad_demo_option_names_its_flag(values: dict[str, str], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        plan_from(values)
