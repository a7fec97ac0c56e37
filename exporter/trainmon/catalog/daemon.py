"""The daemon's own families: its build, each collector's success and duration, the demo marker."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

BUILD_INFO = Family(
    "trainmon_build_info",
    Kind.INFO,
    "trainmon build information.",
    ("version",),
)
COLLECTOR_SUCCESS = Family(
    "trainmon_collector_success",
    Kind.GAUGE,
    "1 if the collector's last run succeeded (or found no hardware).",
    ("collector",),
)
COLLECTOR_DURATION_SECONDS = Family(
    "trainmon_collector_duration_seconds",
    Kind.GAUGE,
    "Duration of the collector's last run.",
    ("collector",),
    unit="seconds",
)
COLLECTOR_LAST_SUCCESS_TIMESTAMP_SECONDS = Family(
    "trainmon_collector_last_success_timestamp_seconds",
    Kind.GAUGE,
    "Unix time of the collector's last success.",
    ("collector",),
    unit="seconds",
)
DEMO_INFO = Family(
    "trainmon_info",
    Kind.INFO,
    "Served by trainmon demo: every GPU and training series is simulated.",
    ("simulated",),
)

FAMILIES: tuple[Family, ...] = (
    BUILD_INFO,
    COLLECTOR_SUCCESS,
    COLLECTOR_DURATION_SECONDS,
    COLLECTOR_LAST_SUCCESS_TIMESTAMP_SECONDS,
    DEMO_INFO,
)
