"""Shared fixtures: a real embedded control plane for the whole session.

`cluster` runs the same code as `dra cluster up` (dra_dev.cluster.controlplane) on free loopback
ports in a temporary directory, so tests never touch a developer's own cluster.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION, binary_set, build
from dra_dev.cluster.controlplane import ControlPlane, running

K8S_VERSION = os.environ.get("DRA_TEST_K8S_VERSION", DEFAULT_K8S_VERSION)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A live control plane (etcd, apiserver, scheduler, controller-manager) with DRA gates on."""
    if not binary_set(K8S_VERSION).complete():
        build(K8S_VERSION, progress=lambda m: print(m, file=sys.stderr))
    with running(Path(tmp_path_factory.mktemp("cluster")), K8S_VERSION) as cp:
        yield cp


@pytest.fixture(scope="session")
def api_client(cluster: ControlPlane):  # type: ignore[no-untyped-def]
    """A kubernetes.client.ApiClient for the admin user of `cluster`."""
    client = cluster.api_client()
    yield client
    client.close()
