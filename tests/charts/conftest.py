"""Fixtures of the chart tests: the real helm (built like the Kubernetes binaries) and kubectl."""

from __future__ import annotations

import os
import sys

import pytest
from chart_helpers import Tool

from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION, binary_set, build, build_helm
from dra_dev.cluster.controlplane import ControlPlane

K8S_VERSION = os.environ.get("DRA_TEST_K8S_VERSION", DEFAULT_K8S_VERSION)


@pytest.fixture(scope="session")
def helm() -> Tool:
    """helm, offline (lint, template)."""
    return Tool(build_helm(progress=lambda m: print(m, file=sys.stderr)))


@pytest.fixture(scope="session")
def kubectl_binary() -> Tool:
    bins = binary_set(K8S_VERSION)
    if not bins.complete():
        build(K8S_VERSION, progress=lambda m: print(m, file=sys.stderr))
    return Tool(bins.path("kubectl"))


@pytest.fixture(scope="session")
def cluster_helm(helm: Tool, cluster: ControlPlane) -> Tool:
    """helm talking to the session's control plane as its admin."""
    return helm.with_kubeconfig(cluster.kubeconfig)


@pytest.fixture(scope="session")
def kubectl(kubectl_binary: Tool, cluster: ControlPlane) -> Tool:
    """kubectl for the session's control plane, as its admin."""
    return kubectl_binary.with_kubeconfig(cluster.kubeconfig)
