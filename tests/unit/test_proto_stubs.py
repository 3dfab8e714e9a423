"""The committed stubs are what the committed .proto files generate, and the wire facts hold."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from dra._runtime.kubelet._proto import (
    dra_health_v1_pb2,
    dra_health_v1alpha1_pb2,
    dra_v1_pb2,
    dra_v1beta1_pb2,
    pluginregistration_v1_pb2,
)
from dra_dev import gen_proto


def test_committed_stubs_are_fresh() -> None:
    fresh = gen_proto.generate()
    stale = gen_proto.stale(fresh, gen_proto.committed())
    assert not stale, f"stale stubs {stale}: run `python -m dra_dev.gen_proto`"


def test_stale_detects_changed_missing_and_extra_files() -> None:
    fresh = {"a_pb2.py": "x", "b_pb2.py": "y"}
    assert gen_proto.stale(fresh, dict(fresh)) == []
    assert gen_proto.stale(fresh, {"a_pb2.py": "x", "b_pb2.py": "edited"}) == ["b_pb2.py"]
    assert gen_proto.stale(fresh, {"a_pb2.py": "x"}) == ["b_pb2.py"]
    assert gen_proto.stale(fresh, {**fresh, "old_pb2.py": "z"}) == ["old_pb2.py"]


def test_generated_imports_are_package_relative() -> None:
    for name, text in gen_proto.committed().items():
        if name.endswith("_grpc.py"):
            assert "from . import " in text, name


def test_check_mode_passes() -> None:
    assert gen_proto.main(["--check"]) == 0


def _fields(msg: type) -> dict[str, int]:
    return {f.name: f.number for f in msg.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_registration_wire_format() -> None:
    fd = pluginregistration_v1_pb2.DESCRIPTOR
    assert fd.package == "pluginregistration"
    svc = fd.services_by_name["Registration"]
    assert svc.full_name == "pluginregistration.Registration"
    assert {m.name for m in svc.methods} == {"GetInfo", "NotifyRegistrationStatus"}
    assert _fields(pluginregistration_v1_pb2.PluginInfo) == {
        "type": 1, "name": 2, "endpoint": 3, "supported_versions": 4,
    }  # fmt: skip
    assert _fields(pluginregistration_v1_pb2.RegistrationStatus) == {"plugin_registered": 1, "error": 2}


def test_dra_wire_format() -> None:
    for pb, version in ((dra_v1_pb2, "v1"), (dra_v1beta1_pb2, "v1beta1")):
        svc = pb.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert svc.full_name == f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
        assert {m.name for m in svc.methods} == {"NodePrepareResources", "NodeUnprepareResources"}
        assert _fields(pb.Claim) == {"namespace": 1, "uid": 2, "name": 3}
        assert _fields(pb.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
        assert _fields(pb.NodeUnprepareResourceResponse) == {"error": 1}
        assert _fields(pb.NodePrepareResourcesResponse) == {"claims": 1}
        assert pb.NodePrepareResourcesResponse.DESCRIPTOR.fields_by_name["claims"].message_type.GetOptions().map_entry
    base = {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
    assert _fields(dra_v1beta1_pb2.Device) == base
    assert _fields(dra_v1_pb2.Device) == {**base, "share_id": 5}
    share = dra_v1_pb2.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert share.has_presence and share.type == FieldDescriptor.TYPE_STRING


def test_health_wire_format() -> None:
    for pb, package in ((dra_health_v1alpha1_pb2, "v1alpha1"), (dra_health_v1_pb2, "v1")):
        svc = pb.DESCRIPTOR.services_by_name["DRAResourceHealth"]
        assert svc.full_name == f"{package}.DRAResourceHealth"
        method = svc.methods_by_name["NodeWatchResources"]
        assert method.server_streaming and not method.client_streaming
        assert dict(pb.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}
        assert _fields(pb.DeviceIdentifier) == {"pool_name": 1, "device_name": 2}
        assert _fields(pb.DeviceHealth) == {
            "device": 1, "health": 2, "last_updated_time": 3, "health_check_timeout_seconds": 4, "message": 5,
        }  # fmt: skip
        assert _fields(pb.NodeWatchResourcesResponse) == {"devices": 1}
