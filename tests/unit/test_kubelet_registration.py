"""Registration, socket layout and lifecycle of KubeletPlugin, driven by the kubelet harness."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from dra._runtime.kubelet import KubeletPaths, KubeletPlugin
from dra._runtime.kubelet._proto import pluginregistration_v1_pb2 as regpb
from dra._runtime.kubelet._proto import pluginregistration_v1_pb2_grpc as reggrpc
from dra.driver import ClaimRef, HealthEvent
from dra.errors import UserError
from dra.testing.kubelet import KubeletHarness, RecordingHandler, short_tmpdir

DRIVER = "gpu.example.com"
POD_A = "0b3c1b4e-7d2a-4e55-9a9e-3f1e2d4c5b6a"
POD_B = "9f8e7d6c-5b4a-4321-8fed-cba987654321"


@pytest.fixture
def root() -> Iterator[Path]:
    with short_tmpdir("kreg") as d:
        yield d


@pytest.fixture
def paths(root: Path) -> KubeletPaths:
    return KubeletPaths(registrar_dir=root / "plugins_registry", plugins_dir=root / "plugins")


def _health() -> Iterator[list[HealthEvent]]:
    yield [HealthEvent("dev0", True)]
    threading.Event().wait()


def _get_info(sock: Path) -> regpb.PluginInfo:
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        info: regpb.PluginInfo = reggrpc.RegistrationStub(ch).GetInfo(regpb.InfoRequest(), timeout=1)
        return info


def test_default_paths_are_kubelets() -> None:
    p = KubeletPaths().resolve(DRIVER)
    assert str(p.registration_socket) == f"/var/lib/kubelet/plugins_registry/{DRIVER}-reg.sock"
    assert str(p.dra_socket) == f"/var/lib/kubelet/plugins/{DRIVER}/dra.sock"
    assert str(p.lock_file) == f"/var/lib/kubelet/plugins/{DRIVER}/serialize.lock"
    r = KubeletPaths().resolve(DRIVER, POD_A)
    assert r.registration_socket.name == f"{DRIVER}-{POD_A}-reg.sock"
    assert r.dra_socket.name == f"dra-{POD_A}.sock"


def test_get_info_lists_v1_first_without_health(paths: KubeletPaths) -> None:
    with KubeletPlugin(DRIVER, RecordingHandler(), None, paths) as plugin:
        info = _get_info(plugin.paths.registration_socket)
        assert info.type == "DRAPlugin"
        assert info.name == DRIVER
        assert info.endpoint == str(paths.plugins_dir / DRIVER / "dra.sock")
        assert os.path.isabs(info.endpoint)
        assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


def test_get_info_advertises_health_when_the_driver_has_it(paths: KubeletPaths) -> None:
    with KubeletPlugin(DRIVER, RecordingHandler(), _health, paths) as plugin:
        info = _get_info(plugin.paths.registration_socket)
        assert list(info.supported_versions) == [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1alpha1.DRAResourceHealth",
            "v1.DRAResourceHealth",
        ]
    # a driver whose health() returns None (the Driver default) advertises no health service
    with KubeletPlugin(DRIVER, RecordingHandler(), lambda: None, paths) as plugin:
        assert list(_get_info(plugin.paths.registration_socket).supported_versions) == [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
        ]


def test_harness_registers_and_plugin_records_it(paths: KubeletPaths) -> None:
    with KubeletPlugin(DRIVER, RecordingHandler(), None, paths) as plugin, KubeletHarness(
        paths.registrar_dir
    ) as kubelet:
        assert not plugin.registered
        reg = kubelet.wait_for_plugin(DRIVER)
        assert reg.service == "v1.DRAPlugin"
        assert reg.endpoint == plugin.endpoint
        assert plugin.wait_registered(5)
        assert plugin.registered and plugin.registration_error == ""
        assert kubelet.failures == []
    assert not plugin.registered  # stopped


def test_kubelet_picks_first_known_entry_and_forced_version(paths: KubeletPaths) -> None:
    with KubeletPlugin(DRIVER, RecordingHandler(), None, paths):
        with KubeletHarness(paths.registrar_dir, services=["v1beta1.DRAPlugin"]) as old_kubelet:
            assert old_kubelet.wait_for_plugin(DRIVER).service == "v1beta1.DRAPlugin"
        with KubeletHarness(paths.registrar_dir, force_service="v1beta1") as kubelet:
            assert kubelet.wait_for_plugin(DRIVER).service == "v1beta1.DRAPlugin"


def test_rejected_registration_is_recorded_and_answered(paths: KubeletPaths) -> None:
    with KubeletPlugin(DRIVER, RecordingHandler(), None, paths) as plugin, KubeletHarness(
        paths.registrar_dir, services=["v1alpha4.NodeService"]
    ) as kubelet:
        kubelet.scan()
        assert kubelet.plugins() == []
        assert len(kubelet.failures) == 1
        # NotifyRegistrationStatus(false) reached the plugin and was answered without error
        assert "none of the services" in kubelet.failures[0].error
        assert "NotifyRegistrationStatus failed" not in kubelet.failures[0].error
        assert not plugin.registered
        assert "none of the services" in plugin.registration_error


def test_dra_socket_serves_before_registration_socket_exists(paths: KubeletPaths) -> None:
    plugin = KubeletPlugin(DRIVER, RecordingHandler(), None, paths)
    seen: list[bool] = []
    done = threading.Event()

    def spy() -> None:
        reg = plugin.paths.registration_socket
        while not done.is_set():
            if reg.exists():
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    try:
                        s.connect(str(plugin.paths.dra_socket))
                        seen.append(True)
                    except OSError:
                        seen.append(False)
                return
            time.sleep(0.0005)

    t = threading.Thread(target=spy)
    t.start()
    try:
        plugin.start()
        t.join(5)
    finally:
        done.set()
        plugin.stop()
    assert seen == [True]


def test_socket_path_too_long_is_a_clear_user_error(root: Path) -> None:
    long_root = root / ("x" * 60)
    paths = KubeletPaths(registrar_dir=long_root / "plugins_registry", plugins_dir=root / "p")
    plugin = KubeletPlugin(DRIVER, RecordingHandler(), None, paths, pod_uid=POD_A)
    sock = plugin.paths.registration_socket
    with pytest.raises(UserError) as err:
        plugin.start()
    msg = str(err.value)
    assert str(sock) in msg
    assert f"{len(str(sock))} bytes" in msg
    assert "107" in msg and "shorter driver name" in msg
    assert not (long_root / "plugins_registry").exists()  # checked before anything is created


def test_stale_own_socket_replaced_other_instances_untouched(paths: KubeletPaths) -> None:
    resolved = paths.resolve(DRIVER, POD_A)
    resolved.plugin_dir.mkdir(parents=True)
    resolved.registrar_dir.mkdir(parents=True)
    stale: list[socket.socket] = []
    for p in (resolved.registration_socket, resolved.dra_socket):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(p))  # bound, never listening: what a SIGKILLed instance leaves behind
        stale.append(s)
    other = paths.resolve(DRIVER, POD_B)
    other_files = [other.registration_socket, other.dra_socket, resolved.registrar_dir / "other.example.com-reg.sock"]
    for p in other_files:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(p))
        stale.append(s)
    try:
        with KubeletPlugin(DRIVER, RecordingHandler(), None, paths, pod_uid=POD_A) as plugin:
            assert _get_info(plugin.paths.registration_socket).name == DRIVER
        assert not resolved.registration_socket.exists()
        assert not resolved.dra_socket.exists()
        assert all(p.exists() for p in other_files)
    finally:
        for s in stale:
            s.close()


def test_stop_removes_own_sockets_only_and_is_idempotent(paths: KubeletPaths) -> None:
    plugin = KubeletPlugin(DRIVER, RecordingHandler(), None, paths)
    plugin.start()
    assert plugin.running
    reg, dra = plugin.paths.registration_socket, plugin.paths.dra_socket
    assert reg.exists() and dra.exists()
    plugin.stop()
    plugin.stop()
    assert not reg.exists() and not dra.exists()
    assert not plugin.running
    # a socket that replaced ours at the same path (someone else's) is left alone
    plugin2 = KubeletPlugin(DRIVER, RecordingHandler(), None, paths)
    plugin2.start()
    plugin2.paths.dra_socket.unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(plugin2.paths.dra_socket))
        plugin2.stop()
        assert plugin2.paths.dra_socket.exists()


def test_rolling_update_two_instances_serve_side_by_side(paths: KubeletPaths) -> None:
    h_old, h_new = RecordingHandler(), RecordingHandler()
    old = KubeletPlugin(DRIVER, h_old, None, paths, pod_uid=POD_A)
    new = KubeletPlugin(DRIVER, h_new, None, paths, pod_uid=POD_B)
    claim = ClaimRef("uid-1", "default", "claim-1")
    with KubeletHarness(paths.registrar_dir) as kubelet:
        old.start()
        try:
            kubelet.wait_for_plugin(DRIVER)
            time.sleep(0.01)  # registration order decides which instance kubelet prefers
            new.start()
            try:
                newest = kubelet.wait_for_plugin(DRIVER, count=2)
                assert newest.endpoint == new.endpoint
                assert {p.endpoint for p in kubelet.plugins(DRIVER)} == {old.endpoint, new.endpoint}
                assert old.endpoint.endswith(f"dra-{POD_A}.sock") and new.endpoint.endswith(f"dra-{POD_B}.sock")
                assert old.wait_registered(5) and new.wait_registered(5)
                # both instances answer kubelet
                for plugin, handler in ((old, h_old), (new, h_new)):
                    res = kubelet.prepare([claim], endpoint=plugin.endpoint)
                    assert res["uid-1"].error == ""
                    assert handler.prepare_calls == [[claim]]
                # the old pod goes away: its sockets go, the new instance keeps serving
                old.stop()
                kubelet.wait_gone(str(old.paths.registration_socket))
                assert not old.paths.dra_socket.exists()
                assert new.paths.registration_socket.exists() and new.paths.dra_socket.exists()
                assert kubelet.unprepare([claim]) == {"uid-1": ""}
                assert h_new.unprepare_calls == [[claim]] and h_old.unprepare_calls == []
            finally:
                new.stop()
        finally:
            old.stop()


def test_restarted_plugin_is_registered_again(paths: KubeletPaths) -> None:
    claim = ClaimRef("uid-1", "default", "claim-1")
    with KubeletHarness(paths.registrar_dir) as kubelet:
        first = KubeletPlugin(DRIVER, RecordingHandler(), None, paths)
        with first:
            before = kubelet.wait_for_plugin(DRIVER)
        h = RecordingHandler()
        restart = time.monotonic()
        with KubeletPlugin(DRIVER, h, None, paths) as second:
            after = kubelet.wait_for_plugin(DRIVER, newer_than=restart)
            assert after.registered_at > before.registered_at
            assert second.wait_registered(5)
            assert kubelet.prepare([claim])["uid-1"].error == ""
            assert h.prepare_calls == [[claim]]
        kubelet.scan()
        assert kubelet.plugins() == []
        assert kubelet.failures == []


@pytest.mark.parametrize("name,uid", [("", None), ("a/b", None), (DRIVER, "../x")])
def test_bad_names_are_user_errors(paths: KubeletPaths, name: str, uid: str | None) -> None:
    with pytest.raises(UserError):
        KubeletPlugin(name, RecordingHandler(), None, paths, pod_uid=uid)


def test_self_check_dials_both_sockets(paths: KubeletPaths) -> None:
    handler = RecordingHandler()
    plugin = KubeletPlugin(DRIVER, handler, None, paths)
    assert plugin.check() == "kubelet plugin not started"
    with plugin:
        assert plugin.check() == ""
        assert handler.prepare_calls == []  # the probe never reaches the handler
        plugin.paths.dra_socket.unlink()  # someone deleted our socket
        assert "DRA socket" in plugin.check(timeout=0.5)
