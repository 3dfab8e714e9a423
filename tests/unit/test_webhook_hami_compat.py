"""HAMi's own pods through the webhook: every entry of tests/data/hami-compat/pods.yaml (HAMi's
examples and doc pods, a pod per HAMi input, hostile variants) runs through /mutate and
/validate as the API server would call them, and the table in examples/hami-compat/README.md is
exactly what they give. After a change in behaviour, rewrite the table with

    DRA_WRITE_HAMI_TABLE=1 python -m pytest tests/unit/test_webhook_hami_compat.py

and read the diff: it is the change users see.

The cluster the pods meet: A100 80GB and 40GB GPUs, Ascend NPUs of 64, 32 and 24 GiB, every
DeviceClass of the shipped examples (the drivers', the memory-only ones, MIG and MPS) with their
configs, and the installed drivers' config decoders.
"""

from __future__ import annotations

import base64
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra._runtime import registry
from dra.webhook import vendors
from dra.webhook.inventory import StaticInventory
from dra.webhook.review import Admission
from dra.webhook.translate import containers

pytestmark = pytest.mark.scheduler

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "hami-compat" / "pods.yaml"
README = ROOT / "examples" / "hami-compat" / "README.md"
BEGIN, END = "<!-- hami-compat table: begin (tests/unit/test_webhook_hami_compat.py writes it) -->", \
    "<!-- hami-compat table: end -->"
GPU, NPU = "hami-core-gpu.project-hami.io", "ascend.project-hami.io"
Gi = 1 << 30
MAPPING = vendors.load()
INVENTORY = StaticInventory({GPU: (80 * Gi, 40 * Gi), NPU: (64 * Gi, 32 * Gi, 24 * Gi)})
PROTECTED = ("kube-system",)
GROUPS = {
    "inputs": "Every HAMi input (one pod each)",
    "nvidia-examples": "HAMi `examples/nvidia`",
    "nvidia-docs": "NVIDIA pods of HAMi's README, `docs/develop` and website",
    "ascend-examples": "HAMi `examples/ascend`",
    "seed": "The seed documents' pods",
    "other": "HAMi's examples of other vendors",
    "hostile": "Hostile inputs",
}
UPSTREAM = ("nvidia-examples", "nvidia-docs", "ascend-examples", "seed", "other")


class Classes:
    """The DeviceClasses of the shipped examples, with their configs."""

    def __init__(self) -> None:
        self.configs: dict[str, list[Mapping[str, Any]]] = {}
        for path in ("examples/hami-compat/deviceclasses.yaml", "examples/hami-core-gpu/mig-mps/deviceclasses.yaml",
                     "examples/hami-core-gpu/deviceclass.yaml", "examples/ascend/deviceclass.yaml"):
            for doc in yaml.safe_load_all((ROOT / path).read_text()):
                if doc and doc.get("kind") == "DeviceClass":
                    self.configs[doc["metadata"]["name"]] = [c["opaque"] for c in doc["spec"].get("config") or []]

    def opaque(self, name: str) -> Sequence[Mapping[str, Any]] | None:
        return self.configs.get(name)

    def exists(self, name: str) -> bool | None:
        return name in self.configs


class Quotas:
    def __init__(self, hard: Mapping[str, Any] | None) -> None:
        self.quotas = [("hami-quota", {k: str(v) for k, v in hard.items()})] if hard else []

    def hard(self, namespace: str) -> list[tuple[str, dict[str, str]]]:
        return self.quotas


def load() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text())
    return entries


def pod_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    def ctr(i: int, c: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": c.get("name", f"c{i}"), "image": "busybox",
                               "resources": {"limits": {k: v if isinstance(v, str) else str(v)
                                                        for k, v in c.get("limits", {}).items()}}}
        out.update({k: c[k] for k in ("env", "securityContext", "restartPolicy") if k in c})
        return out

    ctrs = entry.get("containers") or [{"limits": entry.get("limits", {})}]
    spec: dict[str, Any] = {"containers": [ctr(i, c) for i, c in enumerate(ctrs)]}
    if entry.get("init"):
        spec["initContainers"] = [ctr(i, c) for i, c in enumerate(entry["init"])]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": dict(entry.get("annotations") or {})},
            "spec": spec}


def sent(pod: Mapping[str, Any], namespace: str) -> bool:
    """Would the API server call the webhook (the registration's namespaceSelector and matchConditions)?"""
    if namespace in PROTECTED:
        return False
    names = [r for _, _, c in containers(pod) for f in ("limits", "requests") for r in (c.get("resources") or {}).get(f) or {}]
    return any(MAPPING.owns(r) or MAPPING.vendor_of(r) or MAPPING.profile_vendor(r) for r in names)


def review(obj: Mapping[str, Any], kind: str, namespace: str, group: str = "") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": group, "version": "v1", "kind": kind}, "operation": "CREATE",
        "namespace": namespace, "object": obj}}


class Templates:
    def __init__(self) -> None:
        self.made: list[Mapping[str, Any]] = []

    def ensure(self, body: Mapping[str, Any]) -> None:
        self.made.append(body)


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = op["value"]
    return out


def run(entry: Mapping[str, Any]) -> tuple[str, str]:
    """(outcome, what happened) for one corpus entry."""
    namespace = entry.get("namespace", "team-a")
    pod = pod_of(entry)
    if not sent(pod, namespace):
        return "not-sent", "not sent to the webhook" + (" (namespace kube-system)" if namespace in PROTECTED else
                                                        " (no resource of the mapping): HAMi's device plugin serves it")
    templates = Templates()
    mapping = vendors.with_unannotated(MAPPING, entry.get("unannotatedModes") or [])
    adm = Admission(mapping, INVENTORY, templates, registry.driver_classes(), Classes(),
                    quotas=Quotas(entry.get("quota")))
    resp = adm.mutate(review(pod, "Pod", namespace))["response"]
    if not resp["allowed"]:
        return "refused", "refused: " + resp["status"]["message"].split(": ", 1)[1]
    if "patch" in resp:
        pod = apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
    verdict = adm.validate(review(pod, "Pod", namespace))["response"]
    if not verdict["allowed"]:
        return "refused", "refused: " + verdict["status"]["message"].split(": ", 1)[1]
    for body in templates.made:
        assert adm.validate(review(body, "ResourceClaimTemplate", namespace, "resource.k8s.io"))["response"]["allowed"]
    warnings = resp.get("warnings") or []
    described = describe(templates.made)
    if warnings:
        described += "; warned: " + " / ".join(warnings)
    return ("warned" if warnings else "converted"), described


def _short(device_class: str) -> str:
    return device_class.replace(".project-hami.io", "")


def describe(made: Sequence[Mapping[str, Any]]) -> str:
    if not made:
        return "resources removed, no claim"
    parts = []
    for body in made:
        devices = body["spec"]["spec"]["devices"]
        requests = devices["requests"]
        first = requests[0]
        alts = first.get("firstAvailable") or [first["exactly"]]
        def one(r: Mapping[str, Any]) -> str:
            cap = (r.get("capacity") or {}).get("requests")
            sels = len(r.get("selectors") or ())
            text = f"{_short(r['deviceClassName'])} " + (", ".join(f"{k} {v}" for k, v in cap.items()) if cap else "whole")
            return text + (f" +{sels} sel" if sels else "")
        head = f"{len(requests)}x " + (" or ".join(one(a) for a in alts[:2]) + (" or …" if len(alts) > 2 else ""))
        extra = ["distinct" if c.get("distinctAttribute") else "match " + c["matchAttribute"].rsplit("/", 1)[1]
                 for c in devices.get("constraints") or []]
        if devices.get("config"):
            params = devices["config"][0]["opaque"]["parameters"]
            extra.append("config " + ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items()
                                               if k not in ("apiVersion", "kind")))
        parts.append(head + (f" ({'; '.join(dict.fromkeys(extra))})" if extra else ""))
    return "; ".join(parts)


def cell(text: str, limit: int = 400) -> str:
    # a hostile value's control characters are shown escaped, never written into the README raw
    text = "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def asks(entry: Mapping[str, Any]) -> str:
    ctrs = entry.get("containers") or [{"limits": entry.get("limits", {})}]
    def res(c: Mapping[str, Any]) -> str:
        out = ", ".join(f"{k.split('/', 1)[1] if k.startswith(('nvidia.com/', 'huawei.com/')) else k}={v}"
                        for k, v in (c.get("limits") or {}).items())
        if c.get("env"):
            out += " env " + ",".join(f"{e['name']}={e.get('value')}" for e in c["env"])
        if (c.get("securityContext") or {}).get("privileged"):
            out += " privileged"
        return out
    text = "; ".join(res(c) for c in ctrs)
    if entry.get("init"):
        text = "init: " + "; ".join(res(c) for c in entry["init"]) + " · " + text
    if entry.get("annotations"):
        text += " | " + ", ".join(f"{k}={v}" for k, v in entry["annotations"].items())
    if entry.get("quota"):
        text += " | quota " + ", ".join(f"{k}={v}" for k, v in entry["quota"].items())
    if entry.get("unannotatedModes"):
        text += " | webhook --unannotated-modes " + " ".join(entry["unannotatedModes"])
    if entry.get("namespace"):
        text += f" (namespace {entry['namespace']})"
    return text


def render(results: Sequence[tuple[Mapping[str, Any], str, str]]) -> str:
    upstream = Counter(outcome for e, outcome, _ in results if e["group"] in UPSTREAM)
    lines = [f"Of the {sum(upstream.values())} upstream pods (HAMi's examples and docs, the seed documents'): "
             + ", ".join(f"{n} {o}" for o, n in sorted(upstream.items())) + ".", ""]
    for group, title in GROUPS.items():
        rows = [(e, o, d) for e, o, d in results if e["group"] == group]
        lines += [f"### {title}", "", "| input | asks | result | |", "| --- | --- | --- | --- |"]
        for e, outcome, described in rows:
            name = e.get("input") or f"`{e['source']}`"
            note = f"{outcome}" + (f": {e['note']}" if e.get("note") else "")
            lines.append(f"| {cell(name, 120)} | {cell(asks(e), 200)} | {cell(described)} | {cell(note, 160)} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def results() -> list[tuple[Mapping[str, Any], str, str]]:
    return [(e, *run(e)) for e in load()]


def test_every_entry_has_the_outcome_it_expects() -> None:
    wrong = [(e.get("input") or e["source"], e["expect"], outcome, d) for e, outcome, d in results()
             if outcome != e["expect"]]
    assert not wrong, "\n".join(map(str, wrong))


def test_the_corpus_holds_the_95_upstream_pods_and_every_hami_input() -> None:
    entries = load()
    assert Counter(e["group"] for e in entries if e["group"] in UPSTREAM) == {
        "nvidia-examples": 17, "nvidia-docs": 26, "ascend-examples": 6, "seed": 2, "other": 44}
    inputs = {e["input"] for e in entries if e["group"] == "inputs"}
    for vendor in MAPPING.vendors:  # every resource and annotation the mapping knows has a row naming it
        a = vendor.annotations
        for name in (*vendor.resources.known(), a.use_uuid, a.no_use_uuid, a.use_type, a.no_use_type, a.numa_bind,
                     *(k for k, _ in vendor.warned_annotations), vendor.env.compute_policy, vendor.env.disable_control,
                     vendor.mode.annotation if vendor.mode else None):
            if not name or vendor.model not in (None, "Ascend910B3"):
                continue
            short = name.replace("Ascend910B3", "<model>").replace("huawei.com/<model>", "huawei.com/<model>")
            assert any(short in i or name in i or name.split("/", 1)[-1] in i for i in inputs), name


def test_the_readme_table_is_what_the_webhook_does() -> None:
    table = render(results())
    text = README.read_text()
    assert BEGIN in text and END in text, f"{README} lacks the table's markers"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    wanted = f"{head}{BEGIN}\n{table}{END}{tail}"
    if os.environ.get("DRA_WRITE_HAMI_TABLE") == "1":
        README.write_text(wanted)
    assert text == wanted, ("examples/hami-compat/README.md's table is not what the webhook does; rewrite it with"
                            " DRA_WRITE_HAMI_TABLE=1 and check the diff")
