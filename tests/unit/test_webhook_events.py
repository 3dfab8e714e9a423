"""A converted pod's warnings as Events on its owner (dra.webhook.events), against a recording
API; tests/integration/test_webhook.py has them on a real Deployment."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from dra.webhook import vendors
from dra.webhook.events import MAX_MESSAGE, REASON, OwnerEvents
from dra.webhook.inventory import StaticInventory
from dra.webhook.review import Admission

GPU = "hami-core-gpu.project-hami.io"
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-5d9c", "uid": "rs-uid", "controller": True}
DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train", "uid": "d-uid", "controller": True}


class Api:
    def __init__(self, objects: Mapping[str, dict[str, Any]] | None = None) -> None:
        self.objects = dict(objects or {})
        self.posted: list[dict[str, Any]] = []
        self.reads = 0

    def get(self, path: str, params: dict[str, str]) -> dict[str, Any] | None:
        self.reads += 1
        return self.objects.get(path.format(**params))

    def post(self, path: str, params: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        assert path.format(**params) == f"/api/v1/namespaces/{params['namespace']}/events"
        self.posted.append(body)
        return body


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def deployment_api(rs_uid: str = "rs-uid") -> Api:
    return Api({"/apis/apps/v1/namespaces/team-a/replicasets/train-5d9c": {
        "metadata": {"name": "train-5d9c", "uid": rs_uid, "ownerReferences": [DEPLOY]}}})


def events(api: Api, clock: Clock | None = None, **kw: Any) -> OwnerEvents:
    return OwnerEvents(api.get, api.post, clock or Clock(), instance="webhook-0", **kw)


def meta(*owners: Mapping[str, Any]) -> dict[str, Any]:
    return {"generateName": "train-5d9c-", "ownerReferences": list(owners)}


def test_a_deployments_pod_warns_its_replicaset_and_its_deployment() -> None:
    api = deployment_api()
    ev = events(api)
    ev.notify("team-a", meta(RS), ["annotation hami.io/node-scheduler-policy='spread' is not honoured under DRA: x"])
    ev.drain()
    assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["involvedObject"]["uid"]) for e in api.posted] == [
        ("ReplicaSet", "train-5d9c", "rs-uid"), ("Deployment", "train", "d-uid")]
    e = api.posted[1]
    assert e["type"] == "Warning" and e["reason"] == REASON and e["metadata"]["namespace"] == "team-a"
    assert e["message"] == "pod train-5d9c-*: annotation hami.io/node-scheduler-policy='spread' is not honoured under DRA: x"
    assert e["reportingComponent"] == "dra-webhook" and e["reportingInstance"] == "webhook-0"


def test_a_jobs_pod_warns_its_job() -> None:
    api = Api()
    ev = events(api)
    ev.notify("team-a", meta({"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-uid", "controller": True}),
              ["w"])
    ev.drain()
    assert [e["involvedObject"]["kind"] for e in api.posted] == ["Job"] and api.reads == 0


def test_the_same_warning_is_posted_once_per_ttl_and_an_owner_gets_a_bounded_number() -> None:
    api, clock = deployment_api(), Clock()
    ev = events(api, clock, ttl=600, per_object=3)
    for _ in range(100):  # a Deployment's hundred pods
        ev.notify("team-a", meta(RS), ["w"])
    ev.drain()
    assert len(api.posted) == 2
    ev.notify("team-a", meta(RS), [f"w{i}" for i in range(10)])  # a tenant making ever new values
    ev.drain()
    assert len(api.posted) == 2 + 2 * 2  # 3 per object per window: one used already
    clock.now += 601
    ev.notify("team-a", meta(RS), ["w"])
    ev.drain()
    assert len(api.posted) == 8


def test_hostile_owner_references_get_no_deployment_and_pods_without_a_controller_nothing() -> None:
    api = deployment_api(rs_uid="another")  # the pod names a ReplicaSet UID that is not the stored one's
    ev = events(api)
    ev.notify("team-a", meta(RS), ["w"])
    ev.notify("team-a", meta({**DEPLOY, "controller": False}), ["w"])
    ev.notify("team-a", {"name": "bare"}, ["w"])
    ev.notify("team-a", meta(RS), ["x" * 50_000])
    ev.drain()
    assert [e["involvedObject"]["kind"] for e in api.posted] == ["ReplicaSet", "ReplicaSet"]
    assert len(api.posted[1]["message"]) == MAX_MESSAGE


def test_a_full_queue_drops_and_counts_and_an_api_error_is_logged_not_raised() -> None:
    api = Api()
    ev = events(api, max_queue=2)
    for i in range(5):
        ev.notify("team-a", meta({**RS, "name": f"rs-{i}"}), ["w"])
    assert ev.dropped == 3

    def failing(path: str, params: dict[str, str], body: dict[str, Any]) -> None:
        raise RuntimeError("API down")

    broken = OwnerEvents(api.get, failing, Clock())
    broken.notify("team-a", meta({**RS, "kind": "Job", "apiVersion": "batch/v1"}), ["w"])
    broken.drain()
    assert broken.posted == 0


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def notify(self, namespace: str, meta: Mapping[str, Any], warnings: Any) -> None:
        self.calls.append((namespace, list(warnings)))


def review(obj: Mapping[str, Any], dry_run: bool = False) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "team-a", "object": obj, "dryRun": dry_run}}


def test_mutate_sends_a_converted_pods_warnings_to_its_owner_but_not_on_a_dry_run() -> None:
    rec = Recorder()
    adm = Admission(vendors.load(), StaticInventory({GPU: (80 << 30,)}), None, {}, events=rec)
    pod = {"metadata": {**meta(RS), "annotations": {"hami.io/node-scheduler-policy": "spread"}},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    answer = adm.mutate(review(pod))
    assert answer["response"]["allowed"] and base64.b64decode(answer["response"]["patch"])
    assert rec.calls == [("team-a", answer["response"]["warnings"])]
    adm.mutate(review(pod, dry_run=True))
    adm.mutate(review({**pod, "metadata": {**pod["metadata"], "annotations": {}}}))  # nothing to say
    assert len(rec.calls) == 1
    assert json.dumps(rec.calls)  # plain data
