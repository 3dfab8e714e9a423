"""The charts installed with the real helm onto a real node, running the image `make image` built.

One control plane of this folder's own that serves pods (`pod_access`: ServiceAccount admission
and tokens, the `kubernetes` Service at this host's address), one real node on it (kubelet,
containerd, kube-proxy: the Service network), the image built from the Dockerfile with buildah
and imported into the node's containerd. They need root, runc, iptables, buildah and mmdebstrap
(`make node-deps image-deps`); where missing they skip with the reason, under CI they fail.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ci_gate import skip_or_fail
from kubernetes import client

from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION, binary_set, build, build_helm
from dra_dev.cluster.controlplane import ControlPlane, running
from dra_dev.node.binaries import build_node, node_binaries
from dra_dev.node.node import RealNode, unavailable_reason
from dra_dev.node.project_image import ImageInfo, build_image
from tests.charts.chart_helpers import Tool

K8S_VERSION = os.environ.get("DRA_TEST_K8S_VERSION", DEFAULT_K8S_VERSION)


def _unavailable() -> str | None:
    reason = unavailable_reason()
    if reason:
        return reason
    for tool, package in (("iptables", "iptables"), ("buildah", "buildah"), ("mmdebstrap", "mmdebstrap")):
        if not (shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")):
            return f"{tool} is not installed (make node-deps image-deps, or apt-get install -y {package})"
    return None


@pytest.fixture(scope="session")
def image() -> ImageInfo:
    reason = _unavailable()
    skip_or_fail(reason)
    return build_image(progress=lambda m: print(m, file=sys.stderr))


@pytest.fixture(scope="session")
def pod_cluster(image: ImageInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if not binary_set(K8S_VERSION).complete():
        build(K8S_VERSION, progress=lambda m: print(m, file=sys.stderr))
    with running(Path(tmp_path_factory.mktemp("pod-cluster")), K8S_VERSION, pod_access=True) as cp:
        yield cp


@pytest.fixture(scope="session")
def chart_node(pod_cluster: ControlPlane, image: ImageInfo) -> Iterator[RealNode]:
    if not node_binaries(K8S_VERSION).complete():
        build_node(K8S_VERSION, progress=lambda m: print(m, file=sys.stderr))
    # Short and under /tmp: unix socket paths (containerd, plugins) must fit in 107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="dra-hn-", dir="/tmp"))
    node = RealNode(directory, f"helm-{uuid.uuid4().hex[:6]}", pod_cluster.directory)
    before = os.environ.get("DRA_IMAGE_INFO")
    os.environ["DRA_IMAGE_INFO"] = str(Path(image.archive).with_suffix("").with_suffix(".json"))  # the one just built
    try:
        node.up(progress=lambda m: print(m, file=sys.stderr))
        yield node
    finally:
        node.down(purge=True)
        if before is None:
            os.environ.pop("DRA_IMAGE_INFO", None)
        else:
            os.environ["DRA_IMAGE_INFO"] = before


@pytest.fixture(scope="session")
def node_helm(pod_cluster: ControlPlane) -> Tool:
    return Tool(build_helm(progress=lambda m: print(m, file=sys.stderr)), pod_cluster.kubeconfig)


@pytest.fixture(scope="session")
def node_kubectl(pod_cluster: ControlPlane) -> Tool:
    return Tool(binary_set(K8S_VERSION).path("kubectl"), pod_cluster.kubeconfig)


@pytest.fixture(scope="module")
def api(pod_cluster: ControlPlane) -> Iterator[client.ApiClient]:
    """A client of the pods' control plane, one per test module."""
    c = pod_cluster.api_client()
    yield c
    c.close()
