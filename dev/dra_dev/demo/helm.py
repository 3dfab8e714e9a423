"""`dra demo --helm`: what a user does first, on this machine: the charts installed with Helm.

The image built from the Dockerfile (`make image`), a control plane that serves pods (tokens,
the `kubernetes` Service), a real node with kube-proxy; `helm install` of the GPU chart (fake
H200s) and the webhook chart with `dra node values`; a pod written for HAMi, converted by the
webhook's pod and prepared by the daemon's pod, whose process reports the quota it saw; then
`helm uninstall` and everything stopped (unless `keep`).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from dra.errors import UserError
from dra_dev.cluster.binaries import build_helm
from dra_dev.cluster.controlplane import ControlPlane, Ports
from dra_dev.demo.console import progress, say, step, wait
from dra_dev.node.images import WORKLOAD_IMAGE
from dra_dev.node.node import RealNode, unavailable_reason
from dra_dev.node.project_image import build_image, project_root

NAMESPACE = "dra-system"
_REPORT = re.compile(r"^(quota_total_bytes|over_quota_alloc)=(\S+)$", re.M)


def _ready_pods(core: Any, release: str) -> list[Any] | None:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/instance={release}").items
    return pods if pods and all(p.status.phase == "Running" and all(s.ready for s in p.status.container_statuses or [])
                                for p in pods) else None


def helm_demo(k8s_version: str, keep: bool = False) -> int:
    reason = unavailable_reason()
    if reason:
        raise UserError(f"`dra demo --helm` needs a real node: {reason}")
    work = Path(tempfile.mkdtemp(prefix="dra-demo-helm-", dir="/tmp"))
    step("the image, from the Dockerfile (`make image`: buildah on a Debian base; cached)")
    info = build_image(progress=progress)
    say(f"    {info.reference} {info.digest[:19]}, {info.archive_bytes / 1e6:.0f} MB")
    step(f"a control plane that serves pods (Kubernetes {k8s_version}: ServiceAccount tokens, the kubernetes Service)")
    cp = ControlPlane(work / "cluster", k8s_version, ports=Ports.free(), pod_access=True)
    cp.up(progress=progress)
    node = RealNode(work / "node", f"demo-helm-{uuid.uuid4().hex[:6]}", cp.directory)
    helm = build_helm(progress=progress)
    env_kubeconfig = {"KUBECONFIG": str(cp.kubeconfig)}
    charts = project_root() / "helm"

    def run_helm(*args: str) -> None:
        proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=300,
                              env={**os.environ, **env_kubeconfig})
        if proc.returncode != 0:
            raise UserError(f"helm {' '.join(args[:2])} failed: {proc.stderr.strip()}")

    from kubernetes import client

    api = cp.api_client()
    core: Any = client.CoreV1Api(api)
    try:
        step(f"a real node with kube-proxy (`dra node up`), node {node.name}; the image imported")
        node.up(progress=progress)
        for chart, extra in (("hami-core-gpu", ["--set", "daemon.fake=h200x8"]), ("dra-webhook", [])):
            values = work / f"{chart}.values.yaml"
            values.write_text(yaml.safe_dump(node.helm_values(chart)))
            step(f"helm install {chart} helm/{chart} -n {NAMESPACE} -f <(dra node values {chart}) {' '.join(extra)}")
            started = time.monotonic()
            run_helm("install", chart, str(charts / chart), "-n", NAMESPACE, "--create-namespace", "-f", str(values), *extra)
            pods = wait(f"the {chart} pods to be Ready", partial(_ready_pods, core, chart), 120, 0.5, tolerate=(Exception,))
            say(f"    {len(pods)} pod(s) Ready on {node.name} {time.monotonic() - started:.0f} s after helm install")
        step("a pod written for HAMi (nvidia.com/gpu 1, gpumem 4096, gpucores 30), image " + WORKLOAD_IMAGE)
        core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hami-gpu"}, "spec": {
            "restartPolicy": "Never", "containers": [{"name": "cuda", "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never",
                                                      "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096",
                                                                               "nvidia.com/gpucores": "30"}}}]}})
        stored = core.read_namespaced_pod("hami-gpu", "default")
        template = stored.spec.resource_claims[0].resource_claim_template_name if stored.spec.resource_claims else None
        say(f"    converted by the webhook's pod: claim template {template}")
        phase = wait("the pod to finish", lambda: (p := core.read_namespaced_pod("hami-gpu", "default").status.phase)
                     in ("Succeeded", "Failed") and p, 120, 0.5, tolerate=(Exception,))
        seen = dict(_REPORT.findall(core.read_namespaced_pod_log("hami-gpu", "default")))
        say(f"    {phase}; its process saw " + ", ".join(f"{k}={v}" for k, v in seen.items()))
        held = phase == "Succeeded" and seen == {"quota_total_bytes": str(4 << 30), "over_quota_alloc": "refused"}
        core.delete_namespaced_pod("hami-gpu", "default")
        if keep:
            say(f"kept: KUBECONFIG={cp.kubeconfig}; stop with `dra node down --dir {node.directory} --purge` and "
                f"`dra cluster down --dir {cp.directory}`")
            return 0 if held else 1
        step("helm uninstall dra-webhook hami-core-gpu")
        run_helm("uninstall", "dra-webhook", "hami-core-gpu", "-n", NAMESPACE, "--wait")
        if held:
            say("[bold green]demo complete with Helm[/bold green]: the charts' pods ran the image built here, the "
                "webhook's pod converted the HAMi pod and the daemon's pod held it to its 4Gi.")
            return 0
        say("[bold red]the quota did not hold[/bold red]: read the pod's log above.")
        return 1
    finally:
        api.close()
        if not keep:
            node.down(purge=True)
            cp.down()
