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

    assert (Plan().incident, Plan().after) == (plan.incident, plan.after)
    demo_only = {"simulated", "simulated_pids", *(o.field_name for o in DEMO_OPTIONS)}
    assert set() == demo_only & {f.name for f in dataclasses.fields(Settings)}


def test_the_demo_options_become_the_plan() -> None:
    plan = plan_from({"incident": "gpu-lost", "incident_after": "2.5"})

    assert ("gpu-lost", 2.5) == (plan.incident, plan.after)


@pytest.mark.parametrize(("values", "flag"), [({"incident": "fire"}, "--incident='fire'"),
                                              ({"incident_after": "-1"}, "--incident-after='-1'")])
def test_a_bad_demo_option_names_its_flag(values: dict[str, str], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        plan_from(values)
