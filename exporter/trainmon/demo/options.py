"""`trainmon demo`'s own flags: which incident to plant and when, how often the job checkpoints. They make
the demo's `Plan`, not `Settings`."""

from __future__ import annotations

from collections.abc import Mapping

from trainmon.errors import ConfigError
from trainmon.settings import Option, parse_seconds
from trainmon.simulation.incidents import INCIDENTS, Plan


def parse_incident(flag: str, text: str) -> str | None:
    if not text:
        return None
    if text not in INCIDENTS:
        raise ConfigError(flag, text, f"unknown incident; known: {', '.join(INCIDENTS)}")
    return text


INCIDENT = Option("incident", parse_incident,
                  f"scenario planted after the healthy period, ending in its alert ({', '.join(INCIDENTS)})",
                  own_default="")
INCIDENT_AFTER = Option("incident-after", parse_seconds, "seconds of healthy running before the incident",
                        own_default=f"{Plan().after:g}")
CHECKPOINT_EVERY = Option("checkpoint-every", parse_seconds,
                          "seconds between the job's checkpoints; the first comes after a sixth of them, each lasts "
                          "a fifteenth (a shorter period compresses the healthy run's time)",
                          own_default=f"{Plan().checkpoint_every:g}")
DEMO_OPTIONS = (INCIDENT, INCIDENT_AFTER, CHECKPOINT_EVERY)


def plan_from(values: Mapping[str, str]) -> Plan:
    """The demo's `Plan` from the raw text of its options (flag, environment or default).

    Raises:
        ConfigError: an unknown incident or a bad number of seconds.
    """
    def given(option: Option) -> str:
        return values.get(option.field_name, option.default)

    return Plan(parse_incident(INCIDENT.flag, given(INCIDENT)),
                parse_seconds(INCIDENT_AFTER.flag, given(INCIDENT_AFTER)),
                checkpoint_every=parse_seconds(CHECKPOINT_EVERY.flag, given(CHECKPOINT_EVERY)))
