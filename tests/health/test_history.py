"""The health history: resets and reboots as fixes, the same XID again after one, and the state file's format."""

from __future__ import annotations

import json

import pytest

from trainmon.health.history import (
    AFTER_REBOOT,
    AFTER_RESET,
    MAX_GPUS,
    RETENTION_SECONDS,
    GpuHistory,
    HealthHistory,
    Memory,
    XidRecord,
    decode,
    encode,
)
from trainmon.health.verdict import XidSeen

NOW = 1_800_000_000.0


def test_a_reset_is_a_gpu_coming_back_and_the_same_xid_after_it_recurred() -> None:
    history = HealthHistory("boot-1")
    assert Memory(None, {}) == history.observe("GPU-a", True, [XidSeen(119, NOW)], NOW)
    history.observe("GPU-a", False, [XidSeen(119, NOW)], NOW + 10)
    assert Memory(NOW + 20, {}) == history.observe("GPU-a", True, [XidSeen(119, NOW)], NOW + 20)

    assert Memory(NOW + 20, {119: AFTER_RESET}) == history.observe("GPU-a", True, [XidSeen(119, NOW + 30)],
                                                                   NOW + 30)


def test_the_same_xid_after_a_reboot_recurred_and_another_xid_did_not() -> None:
    first = HealthHistory("boot-1")
    first.observe("GPU-a", True, [XidSeen(79, NOW), XidSeen(119, NOW)], NOW)
    saved = decode(encode(first.saved(NOW)))

    rebooted = HealthHistory("boot-2", saved)
    assert Memory(None, {}) == rebooted.observe("GPU-a", True, [], NOW + 600)
    assert Memory(None, {79: AFTER_REBOOT}) == rebooted.observe("GPU-a", True, [XidSeen(79, NOW + 700),
                                                                               XidSeen(62, NOW + 700)], NOW + 700)
    assert Memory(None, {}) == rebooted.observe("GPU-b", True, [XidSeen(79, NOW + 700)], NOW + 700)


def test_a_daemon_restart_in_the_same_boot_is_not_a_fix() -> None:
    """The kernel log is read again from its start: the XID before the restart is the same sighting."""
    first = HealthHistory("boot-1")
    first.observe("GPU-a", True, [XidSeen(119, NOW)], NOW)
    restarted = HealthHistory("boot-1", first.saved(NOW))

    assert Memory(None, {}) == restarted.observe("GPU-a", True, [XidSeen(119, NOW)], NOW + 60)
    assert Memory(None, {}) == restarted.observe("GPU-a", True, [XidSeen(119, NOW + 90)], NOW + 90)


def test_a_reset_seen_before_a_restart_still_clears_the_xid_and_a_down_gpu_coming_back_is_a_reset() -> None:
    first = HealthHistory("boot-1")
    first.observe("GPU-a", True, [XidSeen(119, NOW)], NOW)
    first.observe("GPU-a", False, [XidSeen(119, NOW)], NOW + 10)
    restarted = HealthHistory("boot-1", first.saved(NOW + 10))

    assert Memory(NOW + 20, {}) == restarted.observe("GPU-a", True, [XidSeen(119, NOW)], NOW + 20)


def test_a_fix_after_the_recurrence_ends_it_until_the_xid_comes_again() -> None:
    history = HealthHistory("boot-1", {"GPU-a": GpuHistory("boot-1", xids={119: XidRecord("boot-0", NOW)})})
    assert {119: AFTER_REBOOT} == history.observe("GPU-a", True, [XidSeen(119, NOW + 10)], NOW + 10).recurred
    history.observe("GPU-a", False, [XidSeen(119, NOW + 10)], NOW + 20)

    assert {} == history.observe("GPU-a", True, [XidSeen(119, NOW + 10)], NOW + 30).recurred
    assert {119: AFTER_RESET} == history.observe("GPU-a", True, [XidSeen(119, NOW + 40)], NOW + 40).recurred


def test_only_xids_fixed_by_a_reset_or_a_reboot_are_remembered() -> None:
    """13 (restart the application), 48's workflow is a reset; 1000 is not in the catalog (drain at once)."""
    history = HealthHistory("boot-1")
    history.observe("GPU-a", True, [XidSeen(13, NOW), XidSeen(48, NOW), XidSeen(1000, NOW)], NOW)

    assert [48] == list(history.saved(NOW)["GPU-a"].xids)


def test_what_is_saved_is_bounded_in_age_and_in_gpus() -> None:
    history = HealthHistory("boot-1")
    history.observe("GPU-old", True, [XidSeen(119, NOW - RETENTION_SECONDS - 1)], NOW)
    for index in range(MAX_GPUS + 5):
        history.observe(f"GPU-{index:03d}", True, [XidSeen(119, NOW + index)], NOW)
    saved = history.saved(NOW)

    assert MAX_GPUS == len(saved)
    assert "GPU-000" not in saved
    assert "GPU-old" not in saved
    assert not history.changed


@pytest.mark.parametrize(("text", "words"), [
    ("{", "Expecting property name"),
    ('{"version": 2, "gpus": {}}', "not a version 1"),
    ('{"version": 1, "gpus": {"GPU-a": {"boot_id": 3, "reset_at": null, "down": false, "xids": {}}}}',
     "expected a string"),
    ('{"version": 1, "gpus": {"GPU-a": {"boot_id": "b", "reset_at": null, "down": false, "xids": '
     '{"119": {"boot_id": "b", "last_seen": "soon", "recurred": ""}}}}}', "expected a number"),
    ('{"version": 1, "gpus": []}', "malformed"),
    ('{"version": 1}', "malformed"),
])
def test_a_corrupt_state_says_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        decode(text)


def test_the_format_round_trips() -> None:
    gpus = {"GPU-a": GpuHistory("boot-1", reset_at=NOW, down=True,
                                xids={79: XidRecord("boot-0", NOW - 5, AFTER_REBOOT)})}
    text = encode(gpus)

    assert gpus == decode(text)
    assert 1 == json.loads(text)["version"]
