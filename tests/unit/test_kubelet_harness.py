"""The kubelet harness rejects what kubelet rejects (tested against hand-built plugin servers)."""

from __future__ import annotations

import concurrent.futures
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from dra._runtime.kubelet._proto import dra_v1_pb2, dra_v1_pb2_grpc, pluginregistration_v1_pb2_grpc
from dra._runtime.kubelet.registration import RegistrationServicer
from dra.driver import ClaimRef
from dra.testing.kubelet import KubeletCallError, KubeletHarness, short_tmpdir


class SloppyDRA(dra_v1_pb2_grpc.DRAPluginServicer):
    """Answers with a made-up claim UID and without the requested ones."""

    def NodePrepareResources(
        self, request: dra_v1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        resp = dra_v1_pb2.NodePrepareResourcesResponse()
        resp.claims["someone-else"].error = ""
        return resp

    def NodeUnprepareResources(
        self, request: dra_v1_pb2.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
        return dra_v1_pb2.NodeUnprepareResourcesResponse()  # no entries at all


class FakePlugin:
    """A registration server (+ a DRA service on the same socket) with free-form PluginInfo."""

    def __init__(self, sock: Path, name: str, endpoint: str, versions: list[str], type_: str = "DRAPlugin") -> None:
        self.reg = RegistrationServicer(name, endpoint, versions)
        self.type = type_
        outer = self

        class Reg(pluginregistration_v1_pb2_grpc.RegistrationServicer):  # type: ignore[misc]
            def GetInfo(self, request, context):  # type: ignore[no-untyped-def]
                info = outer.reg.GetInfo(request, context)
                info.type = outer.type
                return info

            def NotifyRegistrationStatus(self, request, context):  # type: ignore[no-untyped-def]
                return outer.reg.NotifyRegistrationStatus(request, context)

        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(Reg(), self.server)
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(SloppyDRA(), self.server)
        self.server.add_insecure_port(f"unix:{sock}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0).wait()


@pytest.fixture
def regdir() -> Iterator[Path]:
    with short_tmpdir("kh") as d:
        (d / "reg").mkdir()
        yield d / "reg"


def test_empty_endpoint_means_the_registration_socket_and_bad_answers_are_errors(regdir: Path) -> None:
    sock = regdir / "sloppy-reg.sock"
    plugin = FakePlugin(sock, "sloppy.example.com", "", ["v1.DRAPlugin"])
    try:
        with KubeletHarness(regdir) as kubelet:
            reg = kubelet.wait_for_plugin("sloppy.example.com")
            assert reg.endpoint == str(sock)
            assert plugin.reg.registered
            with pytest.raises(KubeletCallError, match="unknown claim"):
                kubelet.prepare([ClaimRef("u1", "ns", "c")])
            with pytest.raises(KubeletCallError, match="skipped 1 ResourceClaims"):
                kubelet.unprepare([ClaimRef("u1", "ns", "c")])
    finally:
        plugin.stop()


def test_wrong_type_empty_versions_and_duplicate_endpoint_are_rejected(regdir: Path) -> None:
    plugins = [
        FakePlugin(regdir / "a-reg.sock", "a.example.com", "/x/dra.sock", ["v1.DRAPlugin"], type_="CSIPlugin"),
        FakePlugin(regdir / "b-reg.sock", "b.example.com", "/x/dra.sock", []),
        FakePlugin(regdir / "c-reg.sock", "c.example.com", "/y/dra.sock", ["v1.DRAPlugin"]),
        FakePlugin(regdir / "d-reg.sock", "d.example.com", "/y/dra.sock", ["v1.DRAPlugin"]),
        FakePlugin(regdir / ".hidden-reg.sock", "e.example.com", "/z/dra.sock", ["v1.DRAPlugin"]),
    ]
    try:
        with KubeletHarness(regdir) as kubelet:
            kubelet.scan()
            assert [p.name for p in kubelet.plugins()] == ["c.example.com"]
            errors = {Path(f.socket).name: f.error for f in kubelet.failures}
            assert "plugin type" in errors["a-reg.sock"]
            assert "supported versions" in errors["b-reg.sock"]
            assert "already registered" in errors["d-reg.sock"]
            assert ".hidden-reg.sock" not in errors
            assert not plugins[0].reg.registered and plugins[2].reg.registered
    finally:
        for p in plugins:
            p.stop()


def test_stale_socket_fails_fast_and_is_retried(regdir: Path) -> None:
    sock = regdir / "stale-reg.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock))  # bound, not listening: what SIGKILL leaves behind
    try:
        with KubeletHarness(regdir, retry_delay=0.05) as kubelet:
            start = time.monotonic()
            kubelet.scan()
            assert time.monotonic() - start < 2
            assert kubelet.plugins() == [] and "dial failed" in kubelet.failures[0].error
            dead.close()
            sock.unlink()
            plugin = FakePlugin(sock, "late.example.com", "/l/dra.sock", ["v1.DRAPlugin"])
            try:
                assert kubelet.wait_for_plugin("late.example.com", timeout=5).registration_socket == str(sock)
            finally:
                plugin.stop()
    finally:
        dead.close()
