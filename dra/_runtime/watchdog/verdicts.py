"""The verdicts, as pure functions: what one poll saw (the processes, who each is, the time) and
what the previous poll left (the conditions that held, the utilization windows) in; the verdicts
and the figures for the metrics out. No I/O, no clock, no logging: the loop feeds them and acts.

A condition is keyed (``("unheld", pid, start)``, ``("over-quota", claim uid, device)``,
``("over-share", claim uid, device)``); its verdict is new the first poll it holds, is kept (the
same `Verdict`) while it holds, and is new again only after a poll in which it did not.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dra._runtime.watchdog.model import ClaimView, Seen, Verdict, WatchdogSettings, mib
from dra.driver import DeviceProcess

Key = tuple[Any, ...]
Sample = tuple[float, float]  # (time, the claim's summed utilization on the device, percent)


@dataclasses.dataclass(frozen=True)
class DeviceCounts:
    """One device's processes this poll (the driver's own included in `processes`)."""

    processes: int = 0
    unheld: int = 0
    unverified: int = 0  # registered in their claim's ledger, not proven held (no maps)


@dataclasses.dataclass(frozen=True)
class ClaimLoad:
    """A claim's processes on one device, against its limits."""

    claim: ClaimView
    device: str
    over_quota: int | None  # bytes beyond quota + tolerance, 0 when within; None: no memory quota
    over_share: float | None  # points beyond share + tolerance, 0.0 when within; None: not judged


@dataclasses.dataclass(frozen=True)
class Judgement:
    """What one poll concluded."""

    active: Mapping[Key, Verdict]  # every condition that holds now
    new: tuple[Verdict, ...]  # those that started this poll, in the order found
    devices: Mapping[str, DeviceCounts]  # every device seen, this poll or before
    loads: tuple[ClaimLoad, ...]
    windows: Mapping[tuple[str, str], tuple[Sample, ...]]  # (claim uid, device) -> utilization samples


def action_for(claim: ClaimView | None, default: str) -> str:
    """The claim's own action (its devices' strongest ``watchdogAction``), else the daemon's."""
    return (claim.action if claim and claim.action else None) or default


def over_quota(used: int, quota: int, processes: int, tolerance: int) -> int:
    """Bytes `processes` processes holding `used` between them are beyond `quota` plus `tolerance`
    each (<= 0: within)."""
    return used - quota - tolerance * processes


def slide(window: Sequence[Sample], sample: Sample, span: float) -> tuple[Sample, ...]:
    """`window` with `sample` added and the samples older than `span` before it dropped."""
    now = sample[0]
    return tuple(s for s in (*window, sample) if s[0] >= now - span)


def share_over(window: Sequence[Sample], now: float, share: int, settings: WatchdogSettings) -> tuple[bool, float, float]:
    """(whether `window` spans the whole share window, its mean utilization, the points by which
    that mean is beyond `share` plus the tolerance). A window counts as full once its first
    sample is at least a share window old, less half an interval of jitter."""
    full = bool(window) and window[0][0] <= now - settings.share_window + settings.interval / 2
    mean = sum(u for _t, u in window) / len(window) if window else 0.0
    return full, mean, mean - share - settings.share_tolerance


def unheld(s: Seen, driver: str, default_action: str) -> Verdict:
    """The verdict on a process no hook of its claim holds (or in none of `driver`'s claims)."""
    p = s.proc
    if s.claim is None:
        where = f"in pod {s.pod_uid}" if s.pod_uid else "a host process, in no pod"
        msg = (f"process {p.pid} on device {p.device} holds {mib(p.memory)} MiB but is in none of "
               f"{driver}'s claims ({where}): nothing limits it. Give the pod a claim of "
               f"this driver, or stop giving it the device another way")
    elif s.claim.marked:
        msg = (f"process {p.pid} of claim {s.claim.namespace}/{s.claim.name} holds {mib(p.memory)} MiB on device "
               f"{p.device}, which the claim was not given: nothing limits it there. Stop giving the pod the device "
               "another way (a privileged container, a host path)")
    else:
        why = s.why or "without the claim's hook loaded"
        msg = (f"process {p.pid} of claim {s.claim.namespace}/{s.claim.name} on device {p.device} holds "
               f"{mib(p.memory)} MiB {why} (a static binary, another "
               "loader, a cleared preload, or a process the watchdog cannot read): its quota is not enforced. "
               "Run it dynamically linked with the preload the claim's containers get")
    return Verdict("unheld", p.device, msg, s.claim, p.pid, s.pod_uid, s.container_id,
                   (s.pod_uid,) if s.pod_uid else (), float(p.memory), action_for(s.claim, default_action),
                   taint_on=p.taint_on)


def over_quota_verdict(claim: ClaimView, dev: str, group: Sequence[Seen], used: int, quota: int, over: int,
                       tolerance: int, default_action: str) -> Verdict:
    """The verdict on a claim's processes on `dev` holding `over` bytes too many; it names the
    process an action takes: one not proven held first, then the largest."""
    target = max(group, key=lambda s: (s.held is not True, s.proc.memory))
    msg = (f"claim {claim.namespace}/{claim.name} holds {mib(used)} MiB on device {dev} in {len(group)} "
           f"process(es), over its quota of {mib(quota)} MiB plus {mib(tolerance)} MiB "
           f"tolerance per process by {mib(over)} MiB (largest: process {target.proc.pid}, "
           f"{mib(target.proc.memory)} MiB). " + (
               "The device did not hold the claim to its memory: check its partition (the instance the driver made)"
               if claim.marked else "Memory the hook did not charge: an unhooked allocation path"))
    pods = tuple(sorted({s.pod_uid for s in group if s.pod_uid}))
    return Verdict("over-quota", dev, msg, claim, target.proc.pid, target.pod_uid, target.container_id, pods,
                   float(over), action_for(claim, default_action))


def over_share_verdict(claim: ClaimView, dev: str, group: Sequence[Seen], mean: float, share: int, over: float,
                       settings: WatchdogSettings) -> Verdict:
    """The verdict on a claim's processes on `dev` using `over` points too many; it names the
    process an action takes: one not proven held first, then the busiest."""
    target = max(group, key=lambda s: (s.held is not True, s.proc.utilization or 0.0))
    msg = (f"claim {claim.namespace}/{claim.name} used {mean:.0f}% of device {dev} over the last "
           f"{settings.share_window:g} s, over its share of {share}% plus {settings.share_tolerance:g} "
           f"points (busiest: process {target.proc.pid}, {target.proc.utilization or 0:.0f}%)")
    pods = tuple(sorted({s.pod_uid for s in group if s.pod_uid}))
    return Verdict("over-share", dev, msg, claim, target.proc.pid, target.pod_uid, target.container_id, pods,
                   over, action_for(claim, settings.action))


def judge(seen: Sequence[Seen], system: Sequence[DeviceProcess], now: float, settings: WatchdogSettings,
          driver: str, active: Mapping[Key, Verdict] | None = None,
          windows: Mapping[tuple[str, str], tuple[Sample, ...]] | None = None,
          known_devices: frozenset[str] = frozenset()) -> Judgement:
    """One poll's verdicts. `seen`: the judged processes (the driver's own, `system`, are only
    counted); `active` and `windows`: the previous judgement's; `known_devices`: devices seen
    before (their counts drop to 0, not out, when their processes are gone)."""
    before: Mapping[Key, Verdict] = active or {}
    windows = windows or {}
    now_active: dict[Key, Verdict] = {}
    new: list[Verdict] = []

    def holds(key: Key, make: Callable[[], Verdict]) -> None:
        v = before.get(key) or make()
        if key not in before:
            new.append(v)
        now_active[key] = v

    unheld_n: dict[str, int] = collections.Counter()
    unverified_n: dict[str, int] = collections.Counter()
    per_claim: dict[tuple[str, str], list[Seen]] = collections.defaultdict(list)
    for s in seen:
        if s.claim is not None:
            per_claim[(s.claim.uid, s.proc.device)].append(s)
        if s.registered:
            unverified_n[s.proc.device] += 1
        if s.held is False:
            unheld_n[s.proc.device] += 1
            holds(("unheld", s.proc.pid, s.start), functools.partial(unheld, s, driver, settings.action))
    devices = {s.proc.device for s in seen} | {p.device for p in system} | set(known_devices)
    counts = {dev: DeviceCounts(sum(1 for s in seen if s.proc.device == dev) + sum(1 for p in system if p.device == dev),
                                unheld_n.get(dev, 0), unverified_n.get(dev, 0)) for dev in devices}
    new_windows = dict(windows)
    loads: list[ClaimLoad] = []
    for (uid, dev), group in per_claim.items():
        claim = group[0].claim
        assert claim is not None
        quota = claim.memory.get(dev)
        quota_over: int | None = None
        if quota is not None:
            used = sum(s.proc.memory for s in group)
            over = over_quota(used, quota, len(group), settings.memory_tolerance)
            quota_over = max(0, over)
            if over > 0:
                holds(("over-quota", uid, dev), functools.partial(
                    over_quota_verdict, claim, dev, group, used, quota, over, settings.memory_tolerance, settings.action))
        share = claim.cores.get(dev, 100)
        utils = [s.proc.utilization for s in group if s.proc.utilization is not None]
        share_points: float | None = None
        if share < 100 and utils:
            window = slide(windows.get((uid, dev), ()), (now, sum(utils)), settings.share_window)
            new_windows[(uid, dev)] = window
            full, mean, over_pp = share_over(window, now, share, settings)
            share_points = max(0.0, over_pp)
            if full and over_pp > 0:
                holds(("over-share", uid, dev), functools.partial(
                    over_share_verdict, claim, dev, group, mean, share, over_pp, settings))
        loads.append(ClaimLoad(claim, dev, quota_over, share_points))
    return Judgement(now_active, tuple(new), counts, tuple(loads), new_windows)
