"""The driver conformance suite: what every vendor driver must do, checked with the driver's own
fake backend. Subclass `DriverConformance` in a pytest module of the driver's tests::

    from dra.testing.conformance import DriverConformance

    class TestConformance(DriverConformance):
        driver_class = MyDriver
        settings = {"profile": "two-gpus"}   # DriverContext.settings
        fake = "two-gpus"                    # DriverContext.fake (the fake backend)
        sample_configs = [MyConfig(mode="exclusive")]

The tests:
- the devices encode into ResourceSlices the real API server accepts as they are (a dry-run
  create; needs a fixture named by `api_client_fixture`, default ``api_client``, giving an
  ApiClient of a cluster with the DRA gates on);
- prepare through the framework is idempotent (same answer, same CDI spec) and the driver's own
  prepare is deterministic;
- unprepare tolerates resources already gone (twice; after the spec and hook dir were removed);
- opaque config round-trips (encode then decode) and the class alone gives the instance's verdict;
- enforcement settings are valid by the hook library's own parser;
- a shared device's shares are held: by the hook `enforcement` names, or, where the driver
  declares `Driver.shares_held_by_device`, by the device, and then no hook is set up or loaded (its
  containers get only the claim's marker, `claim_marker`, read-only);
- a SIGKILL at each fault point of prepare and unprepare is repaired by the next start and the
  repeated kubelet call: nothing is left (record, CDI spec, hook dir, temp files).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dra._runtime import claim_marker, faults
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import PREPARED, Checkpoint
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra._runtime.publish.desired import comparable_devices, desired_pool, slice_object
from dra.config import decode_config, encode_config
from dra.driver import AllocatedDevice, ClaimRef, Driver, DriverContext
from dra.testing.claims import RecordedClaims, claim_dict, opaque, result

NODE = "conformance-node"
_NO_HOOK = {False: "the driver enforces no quota (enforcement() returned None)",
            True: "no hook: the driver's devices hold their shares themselves (shares_held_by_device)"}
HOOK_ONLY_POINTS = ("hookdir.after_lib", "hookdir.after_set", "hookdir.after_switch")
"""Fault points on the way of a hook (the node's hook set built): never reached for a driver whose
devices hold their shares themselves (`Driver.shares_held_by_device`), so not tested for one. (Its
claims pass ``prepare.after_hooks`` too: their marker, `claim_marker`, is written there.)"""


@dataclasses.dataclass
class Node:
    """One node's worth of framework state for the driver under test."""

    root: Path
    driver: Driver
    claims: RecordedClaims
    preparer: ClaimPreparer

    @property
    def hooks_dir(self) -> Path:
        return self.root / "state" / "hooks"

    def leftovers(self, uids: Sequence[str]) -> list[str]:
        """What a claim left behind after its unprepare (empty when clean)."""
        out = []
        for uid in uids:
            if self.preparer.checkpoint.path(uid).exists():
                out.append(f"checkpoint record of {uid}")
            if self.preparer.cdi.spec_path(uid).exists():
                out.append(f"CDI spec of {uid}")
            if (self.hooks_dir / uid).exists():
                out.append(f"hook dir (ledger, config, or marker) of {uid}")
        for d in (self.root / "state" / "claims", self.root / "cdi", self.hooks_dir):
            out += [f"temp file {p}" for p in d.glob(".*.tmp")] if d.is_dir() else []
        return out


class DriverConformance:
    """Base class of a driver's conformance tests (see the module docstring)."""

    driver_class: ClassVar[type[Driver]]
    settings: ClassVar[Mapping[str, str]] = {}
    fake: ClassVar[str | None] = None
    sample_configs: ClassVar[Sequence[Any]] = ()
    api_client_fixture: ClassVar[str] = "api_client"
    fault_points: ClassVar[Sequence[str]] = faults.POINTS

    # -- building blocks (override to adapt) -----------------------------------------------------

    def make_driver(self) -> Driver:
        """The driver, set up with the suite's context, as the daemon would."""
        driver = self.driver_class()
        driver.setup(DriverContext(node_name=NODE, pool_name=NODE, settings=dict(self.settings), fake=self.fake))
        return driver

    def configs(self) -> list[Any]:
        if self.sample_configs:
            return list(self.sample_configs)
        cfg_type = self.driver_class.config_type
        if cfg_type is None:
            return []
        try:
            return [cfg_type()]
        except TypeError:
            return []

    def results(self, driver: Driver) -> list[dict[str, Any]]:
        """One allocation result per device (a share at each capacity's default when shareable)."""
        out = []
        for i, dev in enumerate(driver.devices()):
            capacity = {}
            if dev.allow_multiple_allocations:
                capacity = {k: (c.policy.default if c.policy and c.policy.default else c.value)
                            for k, c in dev.capacity.items()}
            out.append(result(dev.name, request=f"r{i}", driver=driver.name, pool=NODE,
                              share_id=str(uuid.uuid4()) if dev.allow_multiple_allocations else None, **capacity))
        return out

    def node(self, root: Path, driver: Driver | None = None) -> Node:
        driver = driver or self.make_driver()
        claims = RecordedClaims(root / "claims")
        for f in sorted((root / "claims").glob("*.json")) if (root / "claims").is_dir() else []:
            claims.add(json.loads(f.read_text()))
        cp = Checkpoint(root / "state", boot_id="conformance-boot")
        prep = ClaimPreparer(driver, claims, NODE, cp, CDISpecs(driver.cdi_kind, root / "cdi"),
                             hooks=ClaimHooks(cp.state_dir, HookDir(root / "hook-dir")))
        return Node(root, driver, claims, prep)

    def device_keys(self, driver: Driver) -> set[str]:
        """The names a hook quota may key a device of this node by (lower case): its ``uuid``
        attribute. A driver whose hook identifies devices otherwise (what a process in the
        container can observe, e.g. a physical device number) overrides this."""
        return {str(d.attributes.get("uuid", "")).lower() for d in driver.devices()}

    def add_claims(self, node: Node) -> list[ClaimRef]:
        """One claim holding every device (with a sample config when the driver takes one)."""
        config = [opaque(node.driver.name, encode_config(self.driver_class, c)) for c in self.configs()[:1]]
        c = node.claims.add(claim_dict("conformance", "default", results=self.results(node.driver), config=config,
                                       node=NODE))
        return [ClaimRef(c.uid, c.namespace, c.name)]

    # -- the suite -------------------------------------------------------------------------------

    def test_devices_encode_into_slices_the_api_server_accepts(self, request: pytest.FixtureRequest) -> None:
        from kubernetes import client

        driver = self.make_driver()
        devices = list(driver.devices())
        assert devices, "the fake backend publishes no device; give the suite settings/fake that have some"
        pool = desired_pool(driver.name, NODE, devices)
        api: Any = client.ResourceV1Api(request.getfixturevalue(self.api_client_fixture))  # takes manifests (dicts)
        for i in range(len(pool.slices)):
            body = slice_object(pool, i, generation=1, node_uid="00000000-0000-4000-8000-000000000000")
            stored = api.create_resource_slice(body, dry_run="All")
            got = client.ApiClient().sanitize_for_serialization(stored)["spec"]["devices"]
            assert comparable_devices(got) == comparable_devices(body["spec"]["devices"]), (
                "the API server dropped fields of the devices (a feature gate off, or a field it does not know)")

    def test_prepare_is_idempotent_and_deterministic(self, tmp_path: Path) -> None:
        node = self.node(tmp_path)
        refs = self.add_claims(node)
        first = node.preparer.prepare_claims(refs)
        assert all(o.error == "" for o in first.values()), {u: o.error for u, o in first.items()}
        spec = {r.uid: node.preparer.cdi.read_claim(r.uid) for r in refs}
        assert node.preparer.prepare_claims(refs) == first, "a repeated prepare must give the same answer"
        assert {r.uid: node.preparer.cdi.read_claim(r.uid) for r in refs} == spec
        # The driver's own prepare: the same inputs give the same edits and state.
        rec = node.preparer.checkpoint.get(refs[0].uid)
        assert rec is not None and rec.phase == PREPARED
        devices = [AllocatedDevice.of(d) for d in rec.devices]
        a, b = node.driver.prepare(refs[0], devices), node.driver.prepare(refs[0], devices)
        assert [(p.edits, dict(p.state), p.cdi_devices) for p in a] == [(p.edits, dict(p.state), p.cdi_devices)
                                                                       for p in b], "prepare is not deterministic"

    def test_unprepare_tolerates_resources_already_gone(self, tmp_path: Path) -> None:
        node = self.node(tmp_path)
        refs = self.add_claims(node)
        assert all(o.error == "" for o in node.preparer.prepare_claims(refs).values())
        rec = node.preparer.checkpoint.get(refs[0].uid)
        assert rec is not None
        # Someone removed the spec and the hook dir (a cleaned /var/run, a reboot): still fine.
        node.preparer.cdi.remove_claim(refs[0].uid)
        node.preparer.hooks.remove(refs[0].uid)
        assert node.preparer.unprepare_claims(refs) == {r.uid: "" for r in refs}
        assert node.preparer.unprepare_claims(refs) == {r.uid: "" for r in refs}, "a repeated unprepare must succeed"
        assert node.leftovers([r.uid for r in refs]) == []
        # The driver's own unprepare, twice, on what it prepared.
        prepared = node.driver.prepare(refs[0], [AllocatedDevice.of(d) for d in rec.devices])
        node.driver.unprepare(refs[0], prepared)
        node.driver.unprepare(refs[0], prepared)

    def test_config_round_trips_and_the_class_alone_validates(self) -> None:
        if self.driver_class.config_type is None:
            pytest.skip("the driver takes no opaque config")
        configs = self.configs()
        assert configs, "give sample_configs: the config type has required fields"
        for cfg in configs:
            params = json.loads(json.dumps(encode_config(self.driver_class, cfg)))  # through JSON, as the API stores it
            assert decode_config(self.driver_class, params) == cfg
            assert decode_config(self.make_driver(), params) == cfg

    def test_enforcement_settings_are_valid_for_the_hook(self, tmp_path: Path) -> None:
        node = self.node(tmp_path)
        refs = self.add_claims(node)
        out = node.preparer.prepare_claims(refs)
        assert all(o.error == "" for o in out.values()), {u: o.error for u, o in out.items()}
        rec = node.preparer.checkpoint.get(refs[0].uid)
        assert rec is not None
        if rec.enforcement is None:
            pytest.skip(_NO_HOOK[node.driver.shares_held_by_device])
        import hookcore

        config = node.hooks_dir / refs[0].uid / "config"
        parsed = hookcore.parse_config(file_text=config.read_text(), file_path=str(config))
        assert parsed.configured(), "the hook config names no device"
        uuids = self.device_keys(node.driver)
        for q in parsed.configured():
            assert q.uuid is None or q.uuid.lower() in uuids, f"quota for {q.uuid}, not a device of this node"

    def test_the_enforced_library_is_one_it_installs_at_start(self, tmp_path: Path) -> None:
        """A heterogeneous claim's specs (one per driver) mount one hook set only if every
        daemon installed its library before its first prepare: `hook_libraries()` must name it."""
        node = self.node(tmp_path)
        refs = self.add_claims(node)
        out = node.preparer.prepare_claims(refs)
        assert all(o.error == "" for o in out.values()), {u: o.error for u, o in out.items()}
        rec = node.preparer.checkpoint.get(refs[0].uid)
        assert rec is not None
        if rec.enforcement is None:
            pytest.skip(_NO_HOOK[node.driver.shares_held_by_device])
        installed = {Path(p).resolve() for p in node.driver.hook_libraries()}
        assert Path(rec.enforcement["library"]).resolve() in installed, (
            f"enforcement() names {rec.enforcement['library']}, hook_libraries() only {sorted(map(str, installed))}")

    def test_a_shared_devices_shares_are_held_by_a_hook_or_by_the_device(self, tmp_path: Path) -> None:
        """A driver publishing shared devices (`Device.allow_multiple_allocations`) holds every
        share: `enforcement` names a hook, or the driver declares `shares_held_by_device` and then
        no hook is installed, configured or loaded for the claim (a None from `enforcement` alone
        would be a share nothing holds)."""
        node = self.node(tmp_path)
        if not any(d.allow_multiple_allocations for d in node.driver.devices()):
            pytest.skip("the driver publishes no shared device")
        refs = self.add_claims(node)
        out = node.preparer.prepare_claims(refs)
        assert all(o.error == "" for o in out.values()), {u: o.error for u, o in out.items()}
        rec = node.preparer.checkpoint.get(refs[0].uid)
        assert rec is not None
        if not node.driver.shares_held_by_device:
            assert rec.enforcement is not None, (
                "shared devices whose shares nothing holds: return an Enforcement from enforcement(), or declare"
                " shares_held_by_device when the device (its hardware or the vendor's driver) holds them")
            return
        assert rec.enforcement is None, "shares_held_by_device, yet enforcement() names a hook"
        assert list(node.driver.hook_libraries()) == [], "shares_held_by_device, yet hook_libraries() installs one"
        held = sorted(p.name for p in (node.hooks_dir / refs[0].uid).iterdir())
        assert held == [claim_marker.MARKER_FILE], f"a claim no hook holds has its marker alone in its dir, not {held}"
        spec = node.preparer.cdi.read_claim(refs[0].uid)
        assert spec is not None
        edits = [spec.get("containerEdits") or {}, *(d["containerEdits"] for d in spec["devices"])]
        mounts = {m["containerPath"]: m for e in edits for m in e.get("mounts") or ()}
        env = {kv.partition("=")[0] for e in edits for kv in e.get("env") or ()}
        assert "/etc/ld.so.preload" not in mounts and "LD_PRELOAD" not in env, "a hook preloaded where no hook holds"
        marker = mounts.get(claim_marker.container_path(refs[0].uid, node.driver.name))
        assert marker is not None and "ro" in marker["options"], "the claim's marker, read-only: the watchdog's evidence"

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """One crash test per fault point this suite names (pytest calls this on test classes)."""
        if "point" in metafunc.fixturenames:
            unknown = sorted(set(self.fault_points) - set(faults.POINTS))
            assert not unknown, f"fault_points names points the framework does not have: {unknown}"
            hookless = self.driver_class.shares_held_by_device
            metafunc.parametrize("point", [p for p in self.fault_points if not (hookless and p in HOOK_ONLY_POINTS)])

    def test_a_kill_at_each_fault_point_is_repaired(self, tmp_path: Path, point: str) -> None:
        refs = self.add_claims(self.node(tmp_path))
        killed = 0
        for op, then in (("prepare", "prepare"), ("unprepare", "unprepare"), ("prepare", "unprepare")):
            if op == "unprepare":
                assert self._call(tmp_path, "prepare", refs) is not None
            killed += self._call(tmp_path, op, refs, point) is None  # killed when the point is on this path
            answer = self._call(tmp_path, then, refs)
            assert answer is not None
            if then == "prepare":
                assert all(v == "" for v in answer.values()), answer
                assert self._call(tmp_path, "unprepare", refs) == {r.uid: "" for r in refs}
            else:
                assert answer == {r.uid: "" for r in refs}
            assert self.node(tmp_path).leftovers([r.uid for r in refs]) == [], f"after a kill at {point} during {op}"
        assert killed >= 1, f"fault point {point} never fired: is it still placed on the claim path?"

    def _call(self, root: Path, op: str, refs: list[ClaimRef], point: str | None = None) -> dict[str, str] | None:
        """One kubelet call served by a fresh process (start() first, as the daemon does);
        None when the armed fault point killed it."""
        out = root / "call.json"
        out.unlink(missing_ok=True)
        proc = multiprocessing.get_context("fork").Process(target=_serve, args=(self.node, root, op, refs, point, out))
        proc.start()
        proc.join(120)
        if proc.exitcode == -signal.SIGKILL:
            return None
        assert proc.exitcode == 0, f"the {op} process exited {proc.exitcode}"
        answer: dict[str, str] = json.loads(out.read_text())
        return answer


def _serve(make_node: Callable[[Path], Node], root: Path, op: str, refs: list[ClaimRef], point: str | None,
           out: Path) -> None:
    try:
        faults.configure(point)
        node = make_node(root)
        node.preparer.start()
        if op == "prepare":
            answer = {uid: o.error for uid, o in node.preparer.prepare_claims(refs).items()}
        else:
            answer = node.preparer.unprepare_claims(refs)
        out.write_text(json.dumps(answer))
    finally:
        os._exit(0 if out.exists() else 1)

