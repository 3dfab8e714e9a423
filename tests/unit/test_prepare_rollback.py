"""What the framework does when a driver's prepare fails: it rolls back, blames the driver, and
gives unprepare what prepare returned; with the framework's own minimal driver (no vendor code)."""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import dra
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.prepare import ClaimPreparer
from dra.testing.claims import RecordedClaims, claim_dict, opaque, result

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Cfg:
    level: int = 1


class Recorder(dra.Driver):
    """Two devices; records what unprepare receives; fails where a test says."""

    name = "rec.example.com"
    cdi_kind = "k8s.rec.example.com/claim"
    config_type = Cfg
    config_api_version = "rec.example.com/v1"

    def __init__(self) -> None:
        self.fail_prepare: BaseException | None = None
        self.fail_claim_edits: BaseException | None = None
        self.env_name = "REC_DEVICE"
        self.unprepared: list[list[dra.PreparedDevice]] = []

    def devices(self) -> Sequence[dra.Device]:
        return [dra.Device(name="d0"), dra.Device(name="d1")]

    def prepare(self, claim: dra.ClaimRef, devices: Sequence[dra.AllocatedDevice]) -> Sequence[dra.PreparedDevice]:
        if self.fail_prepare is not None:
            raise self.fail_prepare
        return [dra.PreparedDevice(d, dra.ContainerEdits(env={self.env_name: d.device}), state={"handle": f"h-{d.device}"})
                for d in devices]

    def claim_edits(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> dra.ContainerEdits:
        if self.fail_claim_edits is not None:
            raise self.fail_claim_edits
        return dra.ContainerEdits()

    def unprepare(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> None:
        self.unprepared.append(list(prepared))


def rig(tmp_path: Path) -> tuple[ClaimPreparer, Recorder, dra.ClaimRef]:
    driver, claims = Recorder(), RecordedClaims()
    c = claims.add(claim_dict("c", results=[result("d0", driver=Recorder.name)],
                              config=[opaque(Recorder.name, {"apiVersion": "rec.example.com/v1", "kind": "Cfg",
                                                             "level": 3})]))
    prep = ClaimPreparer(driver, claims, "node-a", Checkpoint(tmp_path / "state", boot_id="b"),
                         CDISpecs(driver.cdi_kind, tmp_path / "cdi"))
    return prep, driver, dra.ClaimRef(c.uid, c.namespace, c.name)


def left_behind(prep: ClaimPreparer, ref: dra.ClaimRef) -> list[str]:
    out = []
    if prep.checkpoint.get(ref.uid) is not None:
        out.append("checkpoint record")
    if prep.cdi.spec_path(ref.uid).exists():
        out.append("CDI spec")
    return out


@pytest.mark.parametrize("exc", [KeyError("gpu-9"), RuntimeError("NVML_ERROR_GPU_IS_LOST"), AttributeError("x")])
def test_any_driver_exception_rolls_back_and_is_reported_as_the_drivers(tmp_path: Path, exc: Exception) -> None:
    """Any exception, not only PrepareError, rolls back and is reported as the driver's."""
    prep, driver, ref = rig(tmp_path)
    driver.fail_prepare = exc
    error = prep.prepare_claims([ref])[ref.uid].error
    assert "driver rec.example.com failed in prepare" in error and type(exc).__name__ in error
    assert "bug in the driver" in error and "internal error in the driver framework" not in error
    assert left_behind(prep, ref) == []
    assert len(driver.unprepared) == 1, "the driver gets to undo what it may have done"


def test_an_env_name_the_runtime_would_reject_rolls_back_with_a_clear_error(tmp_path: Path) -> None:
    """An env name that cannot be written into a CDI spec leaves no record behind either."""
    prep, driver, ref = rig(tmp_path)
    driver.env_name = "NOT-VALID"
    error = prep.prepare_claims([ref])[ref.uid].error
    assert "cannot be written as a CDI spec" in error and "'NOT-VALID'" in error
    assert left_behind(prep, ref) == []


def test_rollback_gives_unprepare_what_prepare_returned(tmp_path: Path) -> None:
    """The driver undoes exactly what it did: the edits and state its prepare returned."""
    prep, driver, ref = rig(tmp_path)
    driver.fail_claim_edits = dra.PrepareError("no room for the hook")
    assert "no room for the hook" in prep.prepare_claims([ref])[ref.uid].error
    (undone,) = driver.unprepared
    assert [(p.edits.env, dict(p.state)) for p in undone] == [({"REC_DEVICE": "d0"}, {"handle": "h-d0"})]


def test_unprepare_gets_the_devices_config_back(tmp_path: Path) -> None:
    """Unprepare sees the decoded config prepare was given."""
    prep, driver, ref = rig(tmp_path)
    assert prep.prepare_claims([ref])[ref.uid].error == ""
    assert prep.unprepare_claims([ref]) == {ref.uid: ""}
    (undone,) = driver.unprepared
    assert [p.device.config for p in undone] == [Cfg(level=3)]
    assert [(p.edits.env, dict(p.state)) for p in undone] == [({"REC_DEVICE": "d0"}, {"handle": "h-d0"})]


def test_health_events_carry_no_pool_the_framework_names_it() -> None:
    """Drivers never name the pool (the framework knows it is the node's)."""
    assert [f.name for f in dataclasses.fields(dra.HealthEvent)] == ["device", "healthy", "message"]


class _FakeApi(http.server.ThreadingHTTPServer):
    """Answers GETs from a path -> JSON map and records the paths asked for."""

    def __init__(self, docs: dict[str, Any]) -> None:
        self.docs, self.asked = docs, []
        super().__init__(("127.0.0.1", 0), _Answer)


class _Answer(http.server.BaseHTTPRequestHandler):
    server: _FakeApi

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        self.server.asked.append(path)
        doc = self.server.docs.get(path)
        body = json.dumps(doc if doc is not None else {"kind": "Status", "code": 404}).encode()
        self.send_response(200 if doc is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.parametrize(("labels", "prepared"), [({"pool": "a"}, True), ({"pool": "b"}, False)])
def test_the_daemon_prepares_a_claim_allocated_by_node_label(tmp_path: Path, labels: dict[str, str],
                                                             prepared: bool) -> None:
    """A claim whose allocation selects nodes by label (a pool selected by label) prepares on
    the daemon's node when the Node carries the label, read from the API server, and not else."""
    from kubernetes import client

    from dra._runtime.daemon import Daemon, DaemonSettings

    claim = claim_dict("c", results=[result("d0", driver=Recorder.name)], node=None)
    claim["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "pool", "operator": "In", "values": ["a"]}]}]}
    api_server = _FakeApi({"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c": claim,
                           "/api/v1/nodes/node-a": {"kind": "Node", "metadata": {"name": "node-a", "labels": labels}}})
    threading.Thread(target=api_server.serve_forever, daemon=True).start()
    settings = DaemonSettings(node_name="node-a", plugin_dir=tmp_path / "p", registrar_dir=tmp_path / "r",
                              cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "s", metrics_port=-1,
                              hook_dir=tmp_path / "hd")
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{api_server.server_address[1]}"))
    d = Daemon(Recorder(), settings, api, api)
    try:
        ref = dra.ClaimRef(claim["metadata"]["uid"], "default", "c")
        error = d.preparer.prepare_claims([ref])[ref.uid].error
    finally:
        d.stop()
        api_server.shutdown()
        api_server.server_close()
    assert "/api/v1/nodes/node-a" in api_server.asked, "the daemon never read its Node's labels"
    if prepared:
        assert error == ""
    else:
        assert "node-a" in error and "pool" in error, error
