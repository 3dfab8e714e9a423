"""The driver context: `dra run --set/--fake` reach `Driver.setup`, and the driver's calls back
(`devices_changed`, `report_health`) reach the publisher and kubelet's health stream."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

import dra
from dra._runtime import daemon as daemon_mod
from dra._runtime.daemon import Daemon, DaemonSettings, parse_settings
from dra._runtime.kubelet.health import HealthFeed
from dra.errors import UserError
from drivers.example.driver import ExampleDriver


class Recording(ExampleDriver):
    def __init__(self) -> None:
        self.contexts: list[dra.DriverContext] = []
        self.calls: list[str] = []
        super().__init__()
        self.calls.clear()  # the framework's calls only

    def setup(self, ctx: dra.DriverContext) -> None:
        self.calls.append("setup")
        self.contexts.append(ctx)
        super().setup(ctx)

    def devices(self) -> Sequence[dra.Device]:
        self.calls.append("devices")
        return super().devices()


def _daemon(tmp_path: Path, driver: dra.Driver, **kw: Any) -> Daemon:
    settings = DaemonSettings(node_name="node-a", plugin_dir=tmp_path / "plugins", registrar_dir=tmp_path / "reg",
                              cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", metrics_port=-1, **kw)
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))
    return Daemon(driver, settings, api, api)


def test_parse_settings_keeps_the_last_value_and_rejects_pairs_without_equals() -> None:
    assert parse_settings(["count=4", "memory=8Gi", "count=3", "empty="]) == {"count": "3", "memory": "8Gi", "empty": ""}
    assert parse_settings(None) == {}
    with pytest.raises(UserError, match="expected key=value"):
        parse_settings(["count"])


def test_the_daemon_calls_setup_once_before_devices_with_node_pool_settings_and_fake(tmp_path: Path) -> None:
    driver = Recording()
    fake = tmp_path / "devices.txt"
    fake.write_text("uuid=GPU-00000000-0000-4000-8000-00000000000a,memory=2Gi;uuid=GPU-00000000-0000-4000-8000-00000000000b,memory=4Gi")
    d = _daemon(tmp_path, driver, driver_settings={"enforce": "false"}, fake=str(fake))
    (ctx,) = driver.contexts
    assert (ctx.node_name, ctx.pool_name, dict(ctx.settings), ctx.fake) == ("node-a", "node-a", {"enforce": "false"},
                                                                            str(fake))
    assert driver.calls[0] == "setup"
    assert driver.context is ctx
    assert [(dv.name, dv.attributes["uuid"], dv.capacity["memory"].value) for dv in driver.devices()] == [
        ("gpu-0", "GPU-00000000-0000-4000-8000-00000000000a", "2Gi"),
        ("gpu-1", "GPU-00000000-0000-4000-8000-00000000000b", "4Gi")]
    assert driver.enforce is False
    d.stop()


def test_settings_shape_the_example_drivers_devices(tmp_path: Path) -> None:
    driver = Recording()
    _daemon(tmp_path, driver, driver_settings={"count": "3", "memory": "2Gi"}).stop()
    assert [dv.name for dv in driver.devices()] == ["gpu-0", "gpu-1", "gpu-2"]
    assert driver.memory_bytes == 2 * 1024**3


def test_a_setup_failure_is_the_drivers_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"refused its setup.*count='many'.*expected a whole number"):
        _daemon(tmp_path, ExampleDriver(), driver_settings={"count": "many"})


def test_devices_changed_asks_the_publisher_to_rescan(tmp_path: Path) -> None:
    driver = Recording()
    d = _daemon(tmp_path, driver)
    d.publisher._devices_dirty = False
    d.publisher._wake.clear()
    driver.contexts[0].devices_changed()
    assert d.publisher._devices_dirty and d.publisher._wake.is_set()
    d.stop()


def test_pushed_health_reaches_the_health_source_and_the_stream_ends_at_stop(tmp_path: Path) -> None:
    driver = Recording()
    d = _daemon(tmp_path, driver)
    it = iter(d._health_source())
    got: list[list[dra.HealthEvent]] = []
    t = threading.Thread(target=lambda: got.extend(it), daemon=True)
    t.start()
    snapshot = [dra.HealthEvent("gpu-0", True), dra.HealthEvent("gpu-1", False, "XID 79")]
    driver.contexts[0].report_health(snapshot)
    for _ in range(100):
        if got:
            break
        threading.Event().wait(0.01)
    d.stop()
    t.join(2)
    assert not t.is_alive()
    assert got == [snapshot]


def test_health_feed_yields_only_the_newest_snapshot_to_a_slow_reader() -> None:
    feed = HealthFeed()
    it = feed()
    feed.push([dra.HealthEvent("a", True)])
    feed.push([dra.HealthEvent("a", False)])
    assert next(it) == [dra.HealthEvent("a", False)]
    feed.close()
    assert list(it) == []


def test_dra_run_passes_set_and_fake_and_reads_DRA_FAKE_DEVICES(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[DaemonSettings] = []
    monkeypatch.setattr(daemon_mod, "run", lambda _entry, settings: seen.append(settings))
    import typer

    app = typer.Typer()
    daemon_mod.register(app)
    app.command("noop")(lambda: None)  # two commands: typer keeps `run` as a sub-command
    r = CliRunner().invoke(app, ["run", "example", "--node-name", "n", "--set", "count=4", "--set", "memory=1Gi",
                                 "--fake", "/tmp/devices.txt"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["run", "example", "--node-name", "n"], env={"DRA_FAKE_DEVICES": "two-gpus"})
    assert r.exit_code == 0, r.output
    assert [(dict(s.driver_settings), s.fake) for s in seen] == [({"count": "4", "memory": "1Gi"}, "/tmp/devices.txt"),
                                                                  ({}, "two-gpus")]


def test_the_daemon_installs_every_drivers_hook_library_at_start_so_heterogeneous_claims_share_one_set(
        tmp_path: Path) -> None:
    """Two daemons (two drivers) sharing a hook dir: after both started, a claim prepared by either
    mounts the set holding both libraries (the Ascend engineer's finding, 09:31)."""
    import shutil

    other = tmp_path / "other" / "libvother.so"
    other.parent.mkdir()
    shutil.copy(dra.hook_library("vgpu"), other)
    with other.open("ab") as f:
        f.write(b"\0other")  # another library: other bytes, other name

    class Other(ExampleDriver):
        name = "other.example.com"
        cdi_kind = "k8s.other.example.com/claim"

        def hook_libraries(self) -> Sequence[Path]:
            return [other]

    hook_dir = tmp_path / "hook-dir"
    daemons = []
    for driver in (ExampleDriver(), Other()):
        d = _daemon(tmp_path / driver.name, driver, hook_dir=hook_dir)
        d.install_hook_libraries()
        daemons.append(d)
    from dra._runtime.hookdir import HookDir

    cur = HookDir(hook_dir).current()
    assert cur is not None and set(cur.members) == {"libvgpu.so", "libvother.so"}
    with daemons[0].preparer.hooks.hook_dir.pinned(dra.hook_library("vgpu")) as hset:
        assert hset == cur, "the example driver's next claim mounts the set with both libraries"
    for d in daemons:
        d.stop()


def test_recorded_lists_each_claims_devices_and_is_none_while_a_record_is_unreadable(tmp_path: Path) -> None:
    """`DriverContext.recorded` as the daemon wires it (review 2026-12-04 #8: a driver refuses a
    second claim on a partition another record names): this driver's devices with their claim,
    phase and state; None while a record this version cannot read exists (it may name any device)."""
    import json

    from dra._runtime.checkpoint import PREPARED, PREPARING, Checkpoint, ClaimRecord, DeviceRecord

    driver = Recording()
    d = _daemon(tmp_path, driver)
    (ctx,) = driver.contexts
    cp = Checkpoint(tmp_path / "state")
    uid_a, uid_b, uid_c = (f"00000000-0000-4000-8000-00000000000{i}" for i in (1, 2, 3))
    cp.put(ClaimRecord(uid_a, "ns", "a", PREPARED, cp.boot_id, devices=(
        DeviceRecord(driver.name, "r", "node-a", "dev-0", state={"gi": 1}),
        DeviceRecord("other.driver", "r", "node-a", "dev-0"))))
    cp.put(ClaimRecord(uid_b, "ns", "b", PREPARING, cp.boot_id, devices=(DeviceRecord(driver.name, "r", "node-a", "dev-1"),)))
    assert ctx.recorded() == [
        dra.RecordedDevice(dra.ClaimRef(uid_a, "ns", "a"), PREPARED, "node-a", "dev-0", state={"gi": 1}),
        dra.RecordedDevice(dra.ClaimRef(uid_b, "ns", "b"), PREPARING, "node-a", "dev-1")]
    doc = json.loads(cp.path(uid_b).read_text())
    cp.path(uid_c).write_text(json.dumps({**doc, "apiVersion": "checkpoint.dra.k8s.io/v9"}))  # a newer release's
    assert ctx.recorded() is None
    cp.path(uid_c).unlink()
    assert [r.device for r in ctx.recorded() or ()] == ["dev-0", "dev-1"]
    assert dra.DriverContext("n", "p").recorded() == ()  # outside a daemon: no checkpoint, nothing recorded
    d.stop()
