"""The claim path: kubelet's NodePrepareResources / NodeUnprepareResources, version-free.

`ClaimPreparer` implements `dra._runtime.kubelet.handler.ClaimHandler`. For each claim of a prepare call:

1. Take the claim's lock (a flock per claim: claims never wait for each other, and no
   node-wide lock is held across the API call); GET the ResourceClaim; check the UID, that it
   is allocated, that the allocation is usable on this node, and keep only this driver's
   results. A claim with no result for this driver is an error: kubelet sends a claim only to
   the drivers named in its results, so getting one means kubelet and the API server disagree
   (e.g. the claim was deallocated and allocated again); an empty success would start the
   container without the devices it asked for.
2. Decode this driver's opaque config strictly (class config before claim config, the last
   matching entry wins) and run the config type's `validate()` (`dra.config`); a claim's
   config that loosens enforcement below its class's fails the claim unless the admin allowed
   it (`dra._runtime.loosening`).
3. Still under the claim's lock (so an unprepare of the same claim cannot slip in between
   reading the claim and recording it): answer from the checkpoint when the claim is already
   prepared in this boot with the same allocation; otherwise record ``preparing``, call the
   driver, write the claim's CDI spec, record ``prepared``.

Unprepare works from the checkpoint alone (the claim may be gone): driver unprepare, remove the
CDI spec, delete the record. Unknown UIDs succeed. Every step is idempotent and a crash between
any two steps is repaired by kubelet's retry (fault points mark the steps).

Prepared devices are keyed by `dra.DeviceKey` (pool, device, shareID) within the driver: two shares
of one device, in one claim or two, get distinct CDI devices ``<claimUID>-<device>-<shareID>``.
One record shape per step: a claim's `DeviceResult` becomes the driver's `AllocatedDevice`
(`DeviceResult.allocated`), which becomes the checkpoint's `DeviceRecord` (`DeviceRecord.of`, then
`.prepared`), which answers kubelet (`PreparedResult.of`) and is handed back at unprepare
(`AllocatedDevice.of`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

from dra._runtime import claim_marker
from dra._runtime.cdi import CDISpecs, check_qualified, device_name
from dra._runtime.checkpoint import PREPARED, PREPARING, Checkpoint, CheckpointError, ClaimRecord, DeviceRecord
from dra._runtime.claims import HOSTNAME_LABEL, ClaimSource, DeviceResult, NodeSelector, OpaqueConfig, ResourceClaim
from dra._runtime.enforcement import ClaimHookPlan, ClaimHooks, EnforcementError, merge_edits
from dra._runtime.faults import fault
from dra._runtime.hookdir import HookDir, HookSet
from dra._runtime.kubelet.handler import ClaimOutcome, PreparedResult
from dra._runtime.loosening import describe as describe_loosening
from dra._runtime.loosening import loosened
from dra.config import ConfigError, decode_config, encode_config
from dra.driver import AllocatedDevice, ClaimRef, ContainerEdits, DeviceKey, Driver, PreparedDevice, PrepareError

log = logging.getLogger(__name__)

LockFactory = Callable[[str], AbstractContextManager[Any]]
"""Given a claim UID, a context manager that excludes every other process and thread working on
that claim; held for the claim's whole prepare (GET included) or unprepare. The default is
`Checkpoint.lock` (a flock per claim, shared by every instance on the node). A node-global lock
such as ``dra._runtime.kubelet.lock.SerializeLock`` fits too (``lambda _uid: serialize_lock``) at the
cost of serialising all claims and their API calls."""


class ClaimError(Exception):
    """A per-claim failure whose message goes to kubelet (and the pod's events) as is."""


# --- the preparer ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What a claim asks of this driver, checked and decoded, before any side effect."""

    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    names: tuple[str, ...]  # CDI device name per device
    pods: tuple[str, ...] = ()  # the pods the claim is reserved for, for logs


def _describe_claim(ref: ClaimRef) -> str:
    return f"claim {ref.namespace}/{ref.name} ({ref.uid})"


class ClaimPreparer:
    """The prepare path for one driver on one node; thread-safe, and safe across processes."""

    def __init__(
        self,
        driver: Driver,
        claim_source: ClaimSource,
        node_name: str,
        checkpoint: Checkpoint,
        cdi: CDISpecs,
        lock: LockFactory | None = None,
        node_labels: Mapping[str, str] | Callable[[], Mapping[str, str]] | None = None,
        max_parallel: int = 16,
        hooks: ClaimHooks | None = None,
        allow_claim_loosening: bool = False,
        config_defaults: Mapping[str, Any] | None = None,
    ) -> None:
        """`node_labels`: the Node's labels, for allocations whose nodeSelector tests labels
        (pools with a nodeSelector instead of a nodeName); a mapping, or a function that reads
        them (e.g. `dra._runtime.claims.node_labels_reader`), called only when a selector needs a label
        other than ``kubernetes.io/hostname`` and cached for 30 s. Default: only
        ``kubernetes.io/hostname=<node_name>``. Node-local devices need no labels: the scheduler
        selects them by the ``metadata.name`` field.

        `hooks`: where claims' hook dirs and the node's hook libraries live (the daemon's
        ``--hook-dir``); default: both under the checkpoint's state dir.

        `allow_claim_loosening`: honour a claim's own config where it sets a field weaker than
        its DeviceClass's (`dra._runtime.loosening`); off: such a claim fails, naming the field.
        `config_defaults`: what an unset config field means on this node, by JSON name (e.g. the
        daemon's ``watchdogAction``), for that comparison."""
        self.driver = driver
        self.source = claim_source
        self.node_name = node_name
        self.checkpoint = checkpoint
        self.cdi = cdi
        self.lock: LockFactory = lock or checkpoint.lock
        self.allow_claim_loosening = allow_claim_loosening
        self.config_defaults = dict(config_defaults or {})
        self.hooks = hooks or ClaimHooks(checkpoint.state_dir, HookDir(checkpoint.state_dir / "hook-dir"))
        self._static_labels: dict[str, str] = {HOSTNAME_LABEL: node_name}
        self._read_labels: Callable[[], Mapping[str, str]] | None = None
        if callable(node_labels):
            self._read_labels = node_labels
        elif node_labels is not None:
            self._static_labels = dict(node_labels)
        self._labels_cache: tuple[float, dict[str, str]] | None = None
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="claim")

    def close(self) -> None:
        """Wait for claims in progress in the worker pool (calls with several claims) and stop it."""
        self._pool.shutdown(wait=True)

    # -- start-up --------------------------------------------------------------------------------

    def start(self) -> list[str]:
        """Repair local state at daemon start; returns the paths removed.

        Temp files of interrupted writes go (each under its claim's lock, so a write in progress
        in another instance during a rolling update is never disturbed), then CDI specs and claim
        hook dirs with no checkpoint record, then the hook dir's leftovers and the hook sets that
        no CDI spec mounts. Records in ``preparing`` stay: kubelet's next prepare finishes them,
        its next unprepare undoes them.
        """
        removed = []
        for path, uid in [*self.checkpoint.temp_files(), *self.cdi.temp_files(), *self.hooks.temp_dirs()]:
            with self.lock(uid):
                try:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
                except FileNotFoundError:
                    continue
                removed.append(str(path))
        known = {r.uid for r in self.checkpoint.records()}
        # Records that could not be read (newer version) still protect their specs.
        known |= self.checkpoint.uids()
        removed += [str(p) for p in self.cdi.sweep_orphans(known)]
        removed += [str(p) for p in self.hooks.sweep_orphans(known)]
        removed += self.hooks.hook_dir.recover()
        removed += self.hooks.hook_dir.collect([self.cdi.spec_dir])
        return removed

    # -- prepare ---------------------------------------------------------------------------------

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        if len(claims) <= 1:
            return {c.uid: self._prepare_one(c) for c in claims}
        futures = {c.uid: self._pool.submit(self._prepare_one, c) for c in claims}
        return {uid: f.result() for uid, f in futures.items()}

    def _prepare_one(self, ref: ClaimRef) -> ClaimOutcome:
        t0 = time.monotonic()
        try:
            fault("prepare.start")
            # The claim's own lock (not a node-wide one) covers the GET too: an unprepare of this
            # claim cannot slip in between reading the claim and recording it as preparing.
            with self.lock(ref.uid):
                plan = self._plan(ref)
                fault("prepare.after_fetch")
                outcome = self._prepare_locked(plan)
            pods: tuple[str, ...] = plan.pods
        except ClaimError as e:
            log.warning("claim not prepared", extra={"claim": ref.uid, "claim_ref": f"{ref.namespace}/{ref.name}",
                                                     "error": str(e)})
            return ClaimOutcome(error=str(e))
        except Exception as e:
            log.exception("claim not prepared: internal error",
                          extra={"claim": ref.uid, "claim_ref": f"{ref.namespace}/{ref.name}"})
            return ClaimOutcome(error=f"{_describe_claim(ref)}: internal error in the driver framework: {e!r};"
                                      " kubelet retries; see the driver's log")
        if log.isEnabledFor(logging.INFO):  # skip building the fields when the line is not wanted
            log.info("claim prepared", extra={"claim": ref.uid, "claim_ref": f"{ref.namespace}/{ref.name}",
                                              "pods": pods, "devices": [f"{d.pool}/{d.device}" for d in outcome.devices],
                                              "ms": round((time.monotonic() - t0) * 1000, 1)})
        return outcome

    def _fetch(self, ref: ClaimRef) -> ResourceClaim:
        what = _describe_claim(ref)
        try:
            claim = self.source.get_claim(ref.namespace, ref.name)
        except Exception as e:
            raise ClaimError(f"{what}: cannot read the ResourceClaim from the API server: {e}; kubelet retries") from e
        if claim is None:
            raise ClaimError(f"{what}: ResourceClaim {ref.namespace}/{ref.name} not found in the API server;"
                             " it was deleted or never existed")
        if claim.uid != ref.uid:
            raise ClaimError(f"{what}: the ResourceClaim {ref.namespace}/{ref.name} in the API server has UID"
                             f" {claim.uid}, not {ref.uid}: it was deleted and created again; kubelet must"
                             " restart the pod with the new claim")
        return claim

    def _plan(self, ref: ClaimRef) -> _Plan:
        what = _describe_claim(ref)
        claim = self._fetch(ref)
        alloc = claim.allocation
        if alloc is None:
            raise ClaimError(f"{what}: not allocated (status.allocation is empty); the scheduler allocates it"
                             " before the pod is bound; check the pod's scheduling events")
        if alloc.node_selector is not None and not alloc.node_selector.matches(
                self.node_name, self._labels_for(alloc.node_selector)):
            raise ClaimError(f"{what}: allocated for another node: its nodeSelector {alloc.node_selector.describe()}"
                             f" does not select this node {self.node_name!r}; the pod must run where the claim"
                             " is allocated")
        mine = [r for r in alloc.results if r.driver == self.driver.name]
        if not mine:
            others = sorted({r.driver for r in alloc.results})
            raise ClaimError(f"{what}: has no devices of driver {self.driver.name} (its results are for"
                             f" {', '.join(others) or 'no driver'}); kubelet sends a claim only to the drivers of"
                             " its results, so the claim changed since kubelet read it; kubelet retries")
        negative = [f"{r.pool}/{r.device} {k}={v}" for r in mine for k, v in r.consumed_capacity.items() if v < 0]
        if negative:  # the API server stores them (kubernetes#140563); a negative share would lift the quota
            raise ClaimError(f"{what}: its allocation consumes a negative capacity ({', '.join(negative)}); no scheduler"
                             " writes that: the claim's status was edited by hand or by a faulty controller; delete"
                             " the claim (or its pod) so that kube-scheduler allocates it anew")
        configs = self._configs(ref, claim, mine)
        devices = tuple(r.allocated(configs.get(r.request)) for r in mine)
        pods = tuple(f"{ref.namespace}/{c.name}" for c in claim.reserved_for if c.resource == "pods")
        return _Plan(ref=ref, devices=devices, names=self._cdi_names(ref.uid, mine), pods=pods)

    def _labels_for(self, selector: NodeSelector) -> Mapping[str, str]:
        keys = {r.key for t in selector.terms for r in t.match_expressions}
        if self._read_labels is None or keys <= {HOSTNAME_LABEL}:
            return self._static_labels
        now = time.monotonic()
        if self._labels_cache is None or now - self._labels_cache[0] > 30.0:
            try:
                labels = {HOSTNAME_LABEL: self.node_name, **self._read_labels()}
            except Exception as e:
                raise ClaimError(f"the claim's allocation selects nodes by label ({selector.describe()}) and the"
                                 f" labels of node {self.node_name} cannot be read: {e}; kubelet retries") from e
            self._labels_cache = (now, labels)
        return self._labels_cache[1]

    def _configs(self, ref: ClaimRef, claim: ResourceClaim, results: Sequence[DeviceResult]) -> dict[str, Any]:
        """The decoded config per request name: FromClass before FromClaim, the last match wins.

        A claim's own config is checked against its request's class only: that suffices because
        the driver then holds each device by the strictest config of every request on it
        (`dra.device_share_configs`), which is at least as strict as each request's class."""
        assert claim.allocation is not None
        entries = [c for c in claim.allocation.config if c.driver == self.driver.name]
        entries.sort(key=lambda c: (0 if c.source == "FromClass" else 1, c.index))
        decoded: list[tuple[OpaqueConfig, Any]] = []
        for c in entries:
            try:
                decoded.append((c, decode_config(self.driver, c.parameters)))
            except ConfigError as e:
                fix = ("fix the DeviceClass's spec.config" if c.source == "FromClass"
                       else "fix spec.devices.config of the ResourceClaim (or its template) and recreate it")
                reqs = ", ".join(repr(r) for r in c.requests) if c.requests else "all requests"
                raise ClaimError(f"{_describe_claim(ref)}: opaque config #{c.index} ({c.source}, for {reqs}) of"
                                 f" driver {self.driver.name}: {e}; {fix}") from None
        out: dict[str, Any] = {}
        for r in results:
            baseline: Any = None
            claim_entry: tuple[OpaqueConfig, Any] | None = None
            for c, cfg in decoded:
                if c.applies_to(r.request):
                    out[r.request] = cfg
                    if c.source == "FromClass":
                        baseline = cfg
                    else:
                        claim_entry = (c, cfg)
            if claim_entry is not None and not self.allow_claim_loosening:
                c, cfg = claim_entry
                found = loosened(cfg, baseline, unset={"preload": self.hooks.default_preload.value,
                                                       **self.config_defaults})
                if found:
                    raise ClaimError(f"{_describe_claim(ref)}: opaque config #{c.index} (FromClaim) of driver"
                                     f" {self.driver.name}, for request {r.request!r}: {describe_loosening(found)}")
        return out

    @staticmethod
    def _cdi_names(uid: str, results: Sequence[DeviceResult]) -> tuple[str, ...]:
        keys = [r.key.name for r in results]
        names = []
        for r, key in zip(results, keys, strict=True):
            # Two pools may hold devices of one name (network-attached pools): qualify by pool then.
            if keys.count(key) > 1:
                key = f"{r.pool}-{key}"
            names.append(device_name(uid, key))
        if len(set(names)) != len(names):
            raise ClaimError(f"claim {uid}: two allocation results name the same device share {sorted(names)}")
        return tuple(names)

    def _prepare_locked(self, plan: _Plan) -> ClaimOutcome:
        ref = plan.ref
        try:
            record = self.checkpoint.get(ref.uid)
        except CheckpointError as e:
            raise ClaimError(f"{_describe_claim(ref)}: {e}") from e
        wanted = [d.key for d in plan.devices]
        if record is not None:
            same_devices = (all(d.driver == self.driver.name for d in record.devices)
                            and [d.key for d in record.devices] == wanted)
            if (same_devices and record.boot_id == self.checkpoint.boot_id and record.phase == PREPARED
                    and self._hook_set_present(record)):
                return self._answer_from_record(record)
            if not same_devices:
                # Same UID, other devices: the claim was deallocated and allocated again without an
                # unprepare reaching us. Undo the old devices first.
                log.warning("claim allocation changed since it was prepared; undoing the old devices",
                            extra={"claim": ref.uid, "old": [str(d.key) for d in record.devices],
                                   "new": [str(k) for k in wanted]})
                self._undo(record)
                record = None
            elif record.boot_id != self.checkpoint.boot_id:
                log.info("claim was prepared in an earlier boot; preparing it again",
                         extra={"claim": ref.uid, "recorded_boot": record.boot_id, "boot": self.checkpoint.boot_id})

        now = time.time()
        created = record.created_at if record is not None else now
        driver_cls = type(self.driver)
        base = [DeviceRecord.of(self.driver.name, d, n, encode_config(driver_cls, d.config) if d.config is not None
                                else None)
                for d, n in zip(plan.devices, plan.names, strict=True)]
        self.checkpoint.put(ClaimRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, phase=PREPARING,
                                        boot_id=self.checkpoint.boot_id, devices=tuple(base),
                                        created_at=created, updated_at=now))
        fault("prepare.after_preparing")

        prepared: list[PreparedDevice] = []
        try:
            prepared = list(self.driver.prepare(ref, list(plan.devices)))
            by_key = self._match(ref, plan, prepared)
            claim_edits = self.driver.claim_edits(ref, prepared)
            enforcement = self.driver.enforcement(ref, prepared)
        except Exception as e:
            self._rollback(ref, plan, prepared)
            if isinstance(e, PrepareError):
                raise ClaimError(f"{_describe_claim(ref)}: driver {self.driver.name} refused to prepare: {e}") from e
            log.exception("the driver failed in prepare", extra={"claim": ref.uid, "driver": self.driver.name})
            raise ClaimError(f"{_describe_claim(ref)}: driver {self.driver.name} failed in prepare: {e!r}; this is a"
                             " bug in the driver (it should raise PrepareError to refuse a claim); see the driver's"
                             " log; kubelet retries") from e
        fault("prepare.after_driver")

        hook_plan: ClaimHookPlan | None = None
        if enforcement is not None:
            try:
                hook_plan = self.hooks.plan(enforcement)
            except EnforcementError as e:
                self._rollback(ref, plan, prepared)
                raise ClaimError(f"{_describe_claim(ref)}: the quota of driver {self.driver.name} cannot be enforced:"
                                 f" {e}") from e
            # The dir's path follows from the claim UID, so the "preparing" record already covers
            # it: a crash from here on is undone by unprepare or swept at start once the record is gone.
            try:
                self.hooks.create(ref.uid, hook_plan)
            except (EnforcementError, OSError) as e:
                self._rollback(ref, plan, prepared)
                raise ClaimError(f"{_describe_claim(ref)}: cannot set up the quota enforcement: {e}; kubelet"
                                 " retries") from e
            fault("prepare.after_hooks")
        else:
            # No hook holds it: the claim's containers still get a file of the daemon's, the
            # watchdog's evidence that a process on its devices is the claim's (claim_marker).
            try:
                claim_edits = merge_edits(claim_edits, claim_marker.mark(self.hooks, ref.uid, self.driver.name))
            except OSError as e:
                self._rollback(ref, plan, prepared)
                raise ClaimError(f"{_describe_claim(ref)}: cannot write the claim's marker under"
                                 f" {self.hooks.root}: {e}; kubelet retries") from e
            fault("prepare.after_hooks")

        edits_by_name = [(n, by_key[d.key].edits) for d, n in zip(plan.devices, plan.names, strict=True)]
        try:
            with self._claim_hook_edits(ref.uid, hook_plan) as (hook_edits, hook_set):
                all_claim_edits = merge_edits(claim_edits, hook_edits)
                ids = self.cdi.write_claim(ref.uid, edits_by_name, all_claim_edits)
        except (ValueError, EnforcementError) as e:  # e.g. an env name the driver made up: CDI would reject it
            self._rollback(ref, plan, prepared)
            raise ClaimError(f"{_describe_claim(ref)}: the container edits of driver {self.driver.name} cannot be"
                             f" written as a CDI spec: {e}") from e
        fault("prepare.after_cdi")

        final = tuple(b.prepared(cid, by_key[b.key]) for b, cid in zip(base, ids, strict=True))
        hooks_json = None
        if hook_plan is not None and hook_set is not None:
            hooks_json = {**hook_plan.to_json(), "set": str(hook_set.path)}
        done = ClaimRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, phase=PREPARED,
                           boot_id=self.checkpoint.boot_id, devices=final, claim_edits=all_claim_edits,
                           created_at=created, updated_at=time.time(), enforcement=hooks_json)
        self.checkpoint.put(done)
        fault("prepare.after_prepared")
        return _outcome(done)

    @contextlib.contextmanager
    def _claim_hook_edits(self, uid: str, hook_plan: ClaimHookPlan | None
                          ) -> Iterator[tuple[ContainerEdits, HookSet | None]]:
        if hook_plan is None:
            yield ContainerEdits(), None
            return
        with self.hooks.pinned_edits(uid, hook_plan) as (edits, hset):
            yield edits, hset

    def _match(self, ref: ClaimRef, plan: _Plan, prepared: Sequence[PreparedDevice]
               ) -> dict[DeviceKey, PreparedDevice]:
        by_key = {p.device.key: p for p in prepared}
        missing = [d for d in plan.devices if d.key not in by_key]
        if missing or len(by_key) != len(prepared):
            raise PrepareError(
                f"the driver's prepare returned {len(prepared)} device(s) that do not match the claim's"
                f" {len(plan.devices)} allocated device(s) one to one (missing: "
                f"{[f'{d.pool}/{d.device}' for d in missing]}); this is a bug in the driver"
            )
        for p in prepared:
            for cdi_id in p.cdi_devices:
                try:
                    check_qualified(cdi_id)
                except ValueError as e:
                    raise PrepareError(f"device {p.device.device}: cdi_devices: {e}; this is a bug in the driver") from None
        return by_key

    def _rollback(self, ref: ClaimRef, plan: _Plan, prepared: Sequence[PreparedDevice]) -> None:
        """After a failed prepare: undo what the driver did (with what it returned, when it
        returned anything), remove the claim's hook dir and spec, then forget the claim."""
        matched = {p.device.key: p for p in prepared}
        undo = [matched.get(d.key) or PreparedDevice(d, ContainerEdits()) for d in plan.devices]
        try:
            self.driver.unprepare(ref, undo)
        except Exception:
            log.exception("rollback after a failed prepare failed; keeping the record for unprepare",
                          extra={"claim": ref.uid})
            return
        self.cdi.remove_claim(ref.uid)
        self.hooks.remove(ref.uid)
        self.checkpoint.delete(ref.uid)

    def _hook_set_present(self, record: ClaimRecord) -> bool:
        """False when the hook set the record's spec mounts is gone (then the claim is prepared again)."""
        hook_set = (record.enforcement or {}).get("set")
        return hook_set is None or os.path.isdir(hook_set)

    def _answer_from_record(self, record: ClaimRecord) -> ClaimOutcome:
        # The CDI spec may be gone (someone cleaned /var/run/cdi): rewrite it from the record.
        if not self.cdi.spec_path(record.uid).exists():
            log.warning("CDI spec of a prepared claim was missing; rewriting it from the checkpoint",
                        extra={"claim": record.uid})
            with self.hooks.hook_dir.lock(shared=True):  # the set it mounts must not be collected meanwhile
                if not self._hook_set_present(record):
                    raise ClaimError(f"claim {record.uid}: its hook set was removed while its CDI spec was missing;"
                                     " kubelet retries and the claim is prepared again")
                self.cdi.write_claim(record.uid, [(d.cdi_name, d.edits) for d in record.devices], record.claim_edits)
        return _outcome(record)

    # -- unprepare -------------------------------------------------------------------------------

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        if len(claims) <= 1:
            return {c.uid: self._unprepare_one(c) for c in claims}
        futures = {c.uid: self._pool.submit(self._unprepare_one, c) for c in claims}
        return {uid: f.result() for uid, f in futures.items()}

    def _unprepare_one(self, ref: ClaimRef) -> str:
        try:
            fault("unprepare.start")
            with self.lock(ref.uid):
                try:
                    record = self.checkpoint.get(ref.uid)
                except CheckpointError as e:
                    return f"{_describe_claim(ref)}: {e}"
                if record is None:
                    # Unknown (never prepared here, already unprepared, or its record was corrupt):
                    # still make sure no spec of ours is left for it.
                    self.cdi.remove_claim(ref.uid)
                    self.hooks.remove(ref.uid)
                    return ""
                self._undo(record)
        except Exception as e:
            log.exception("claim not unprepared",
                          extra={"claim": ref.uid, "claim_ref": f"{ref.namespace}/{ref.name}"})
            return f"{_describe_claim(ref)}: unprepare failed: {e}; kubelet retries"
        if log.isEnabledFor(logging.INFO):
            log.info("claim unprepared", extra={"claim": ref.uid, "claim_ref": f"{ref.namespace}/{ref.name}",
                                                "devices": [f"{d.pool}/{d.device}" for d in record.devices],
                                                "phase": record.phase})
        return ""

    def _recorded_config(self, record: ClaimRecord, d: DeviceRecord) -> Any:
        if d.config is None:
            return None
        try:
            return decode_config(type(self.driver), dict(d.config))
        except ConfigError as e:  # e.g. the config type changed in an upgrade
            log.warning("recorded config no longer decodes; unprepare gets None",
                        extra={"claim": record.uid, "device": d.device, "error": str(e)})
            return None

    def _undo(self, record: ClaimRecord) -> None:
        ref = ClaimRef(uid=record.uid, namespace=record.namespace, name=record.name)
        prepared = [PreparedDevice(AllocatedDevice.of(d, self._recorded_config(record, d)), d.edits, state=dict(d.state),
                                   cdi_devices=tuple(d.cdi_ids[1:]))
                    for d in record.devices if d.driver == self.driver.name]
        # Also for records of an earlier boot or still "preparing": the driver's unprepare must
        # tolerate resources that are already gone, and may hold state that survives a reboot.
        self.driver.unprepare(ref, prepared)
        fault("unprepare.after_driver")
        self.cdi.remove_claim(record.uid)
        fault("unprepare.after_cdi")
        self.hooks.remove(record.uid)  # after the spec that mounts it
        fault("unprepare.after_hooks")
        self.checkpoint.delete(record.uid)
        fault("unprepare.after_checkpoint")


def _outcome(record: ClaimRecord) -> ClaimOutcome:
    return ClaimOutcome(devices=tuple(PreparedResult.of(d) for d in record.devices))
