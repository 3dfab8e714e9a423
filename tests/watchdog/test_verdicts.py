"""The watchdog's verdicts as pure functions (`dra._runtime.watchdog.verdicts`): records in, a
judgement out; no driver, no /proc, no clock (the rig's tests cover those around them)."""

from __future__ import annotations

import dataclasses

from dra._runtime.watchdog import verdicts
from dra._runtime.watchdog.identify import by_pod
from dra._runtime.watchdog.model import ClaimView, Seen, WatchdogSettings
from dra._runtime.watchdog.verdicts import Judgement, judge
from dra.driver import DeviceProcess

MiB = 1 << 20
GiB = 1 << 30
DRIVER = "gpu.example.com"


def claim(uid: str = "c1", memory: int | None = 4 * GiB, cores: int = 100, action: str | None = None,
          device: str = "gpu-0") -> ClaimView:
    return ClaimView(uid, "team-a", f"claim-{uid}", frozenset([device]), {device: memory}, {device: cores},
                     frozenset(), action)


def seen(pid: int, c: ClaimView | None, memory: int = GiB, held: bool | None = True, util: float | None = None,
         device: str = "gpu-0", pod: str | None = "pod-a", registered: bool = False, readable: bool = True) -> Seen:
    return Seen(DeviceProcess(device, f"GPU-{device}", pid, memory, util), 1000 + pid, pod, None, c, held, registered=registered,
                readable=readable)


def kinds(j: Judgement) -> list[tuple[str, int | None]]:
    return [(v.kind, v.pid) for v in j.new]


def test_over_quota_is_the_bytes_beyond_quota_plus_the_tolerance_per_process() -> None:
    assert verdicts.over_quota(used=5 * GiB, quota=4 * GiB, processes=2, tolerance=64 * MiB) == GiB - 128 * MiB
    assert verdicts.over_quota(used=4 * GiB + 64 * MiB, quota=4 * GiB, processes=1, tolerance=64 * MiB) == 0
    assert verdicts.over_quota(used=GiB, quota=4 * GiB, processes=1, tolerance=0) == -3 * GiB


def test_a_claims_processes_together_within_quota_and_tolerance_get_no_verdict() -> None:
    c = claim(memory=4 * GiB)
    settings = WatchdogSettings(memory_tolerance=64 * MiB)
    within = judge([seen(1, c, 2 * GiB), seen(2, c, 2 * GiB + 128 * MiB)], (), 0.0, settings, DRIVER)
    assert within.new == () and within.active == {}
    assert [(load.device, load.over_quota, load.over_share) for load in within.loads] == [("gpu-0", 0, None)]
    over = judge([seen(1, c, 2 * GiB), seen(2, c, 2 * GiB + 129 * MiB)], (), 0.0, settings, DRIVER)
    assert kinds(over) == [("over-quota", 2)]
    assert over.new[0].amount == MiB and over.loads[0].over_quota == MiB
    assert "plus 64 MiB tolerance per process by 1 MiB" in over.new[0].message


def test_the_over_quota_names_a_process_not_proven_held_before_the_largest() -> None:
    c = claim(memory=GiB, action="kill")
    group = [seen(1, c, 3 * GiB, pod="pod-b"), seen(2, c, 100 * MiB, held=None, pod="pod-a"),
             seen(3, c, 2 * GiB, pod="pod-b")]
    (v,) = judge(group, (), 0.0, WatchdogSettings(), DRIVER).new
    assert (v.kind, v.pid, v.pod_uid, v.pod_uids, v.action) == ("over-quota", 2, "pod-a", ("pod-a", "pod-b"), "kill")
    (largest,) = judge([dataclasses.replace(s, held=True) for s in group], (), 0.0, WatchdogSettings(), DRIVER).new
    assert largest.pid == 1


def test_no_memory_verdict_without_a_memory_quota() -> None:
    j = judge([seen(1, claim(memory=None), 80 * GiB)], (), 0.0, WatchdogSettings(), DRIVER)
    assert j.new == () and j.loads[0].over_quota is None


def test_a_verdict_is_new_once_while_its_condition_holds_and_again_after_it_cleared() -> None:
    c = claim(memory=GiB)
    s = WatchdogSettings()
    first = judge([seen(1, c, 2 * GiB)], (), 0.0, s, DRIVER)
    again = judge([seen(1, c, 3 * GiB)], (), 1.0, s, DRIVER, first.active)
    assert kinds(first) == [("over-quota", 1)] and again.new == ()
    assert list(again.active.values()) == list(first.active.values())  # the same verdict, its amount as first given
    cleared = judge([seen(1, c, GiB // 2)], (), 2.0, s, DRIVER, again.active)
    assert cleared.active == {} and cleared.new == ()
    assert kinds(judge([seen(1, c, 2 * GiB)], (), 3.0, s, DRIVER, cleared.active)) == [("over-quota", 1)]


def test_unheld_is_given_for_held_false_only_and_registered_is_counted_apart() -> None:
    c = claim()
    j = judge([seen(1, c, held=True), seen(2, c, held=None, registered=True), seen(3, c, held=False),
               seen(4, None, held=False, pod=None)], (), 0.0, WatchdogSettings(action="kill"), DRIVER)
    assert kinds(j) == [("unheld", 3), ("unheld", 4)]
    nobody = j.new[1]
    assert nobody.claim is None and nobody.pod_uids == () and "a host process, in no pod" in nobody.message
    assert f"none of {DRIVER}'s claims" in nobody.message and nobody.action == "kill"
    assert j.devices["gpu-0"] == verdicts.DeviceCounts(processes=4, unheld=2, unverified=1)


def test_device_counts_include_the_drivers_own_processes_and_devices_seen_before() -> None:
    server = DeviceProcess("gpu-1", "GPU-gpu-1", 7, 10 * GiB, None, system="mps")
    j = judge([seen(1, claim())], [server], 0.0, WatchdogSettings(), DRIVER, known_devices=frozenset(["gpu-2"]))
    assert j.devices == {"gpu-0": verdicts.DeviceCounts(1), "gpu-1": verdicts.DeviceCounts(1),
                         "gpu-2": verdicts.DeviceCounts(0)}


def test_over_share_waits_for_a_full_window_and_averages_it() -> None:
    c = claim(cores=30)
    s = WatchdogSettings(share_window=3, share_tolerance=10)
    got, active, windows = [], None, None
    for t, util in enumerate([80, 80, 80, 80, 80]):
        j = judge([seen(1, c, util=util)], (), float(t), s, DRIVER, active, windows)
        got.append(kinds(j))
        active, windows = j.active, j.windows
        assert j.loads[0].over_share == 40
    assert got == [[], [], [], [("over-share", 1)], []]  # samples at 0..2 do not span 3 s; t=3 does
    assert windows is not None and [t for t, _u in windows[("c1", "gpu-0")]] == [1.0, 2.0, 3.0, 4.0]
    (v,) = judge([seen(1, c, util=80)], (), 10.0, s, DRIVER, {}, {("c1", "gpu-0"): ((7.0, 80.0),)}).new
    assert v.amount == 40 and "used 80% of device gpu-0 over the last 3 s, over its share of 30%" in v.message


def test_no_share_verdict_without_a_compute_limit_or_utilization() -> None:
    s = WatchdogSettings(share_window=1)
    whole = judge([seen(1, claim(cores=100), util=100)], (), 5.0, s, DRIVER, {}, {("c1", "gpu-0"): ((1.0, 100.0),)})
    silent = judge([seen(1, claim(cores=10), util=None)], (), 5.0, s, DRIVER, {}, {("c1", "gpu-0"): ((1.0, 100.0),)})
    assert whole.new == silent.new == ()
    assert whole.loads[0].over_share is None and silent.loads[0].over_share is None


def test_the_window_slides_and_the_mean_is_over_what_is_in_it() -> None:
    window = verdicts.slide(((0.0, 10.0), (1.0, 20.0), (2.0, 30.0)), (3.0, 60.0), span=2.0)
    assert window == ((1.0, 20.0), (2.0, 30.0), (3.0, 60.0))
    s = WatchdogSettings(interval=1.0, share_window=2.0, share_tolerance=5.0)
    assert verdicts.share_over(window, 3.0, 20, s) == (True, 110 / 3, 110 / 3 - 25)
    assert verdicts.share_over(window[1:], 3.0, 20, s)[0] is False  # 1 s of samples: not a full window


def test_the_claims_own_action_wins_over_the_daemons() -> None:
    assert verdicts.action_for(claim(action="taint"), "report") == "taint"
    assert verdicts.action_for(claim(action=None), "kill") == "kill"
    assert verdicts.action_for(None, "report") == "report"


def test_an_unreadable_process_counts_in_the_claim_of_its_pod_on_that_device() -> None:
    c = claim()
    other = claim("c2", device="gpu-1")
    procs = [seen(1, c, pod="pod-a"), seen(2, other, device="gpu-1", pod="pod-a"),
             seen(3, None, held=False, pod="pod-a", readable=False),
             seen(4, None, held=False, pod="pod-a", readable=False, device="gpu-3"),
             seen(5, None, held=False, pod=None, readable=False)]
    got = {s.proc.pid: s.claim.uid if s.claim else None for s in by_pod(procs)}
    assert got == {1: "c1", 2: "c2", 3: "c1", 4: None, 5: None}
