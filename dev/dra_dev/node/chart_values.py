"""What the driver and webhook charts need to run on a node of the rig: a values file naming the
project image it imported and its paths, and the labels their node selectors want."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dra.errors import UserError
from dra.fakes import STUB_DIR_ENV
from dra_dev.node import config as cfg
from dra_dev.node.state import NodeState

VALUES_CHARTS = ("hami-core-gpu", "ascend", "hygon-dcu", "cambricon-mlu", "dra-webhook")


def helm_values(chart: str, name: str, directory: Path, state: NodeState, layout: cfg.NodeLayout) -> dict[str, Any]:
    """A values file for `chart` on node `name`: the project image (imported, never pulled),
    kubelet's paths, the CDI and hook dirs under the node dir, the daemons on this node, and
    a host dir (same path inside) where a daemon run with `daemon.fake` puts its stub libraries
    (CDI specs name host paths; the stubs are in the image)."""
    if chart not in VALUES_CHARTS:
        raise UserError(f"no values for chart {chart!r}: pick one of {', '.join(VALUES_CHARTS)}.")
    if not state.image:
        raise UserError(f"node {name} has no project image: run `make image`, then `dra node up --dir "
                        f"{directory}` again (it imports dist/dra-hami-*.oci.tar when the cluster serves pods).")
    repository, _, tag = state.image.rpartition(":")
    values: dict[str, Any] = {"image": {"repository": repository, "tag": tag, "pullPolicy": "Never"}}
    if chart == "dra-webhook":
        # The chart refuses to install while nothing authenticates the webhook's callers. This
        # rig can offer neither way: its API server presents no webhook client certificate (no
        # admission config), and its bridge CNI enforces no NetworkPolicy, so an apiServerFrom
        # would be a promise nothing keeps. Say so instead of pretending.
        values["webhook"] = {"acceptUnauthenticatedCallers": True}
        return values
    lay = layout
    values["paths"] = {"kubeletPluginsDir": str(lay.plugin_dir), "kubeletRegistrarDir": str(lay.registry_dir),
                       "cdiDir": str(lay.cdi_dir), "hookDir": str(lay.hook_dir),
                       # the rig's daemons run on fakes, which keep their own dirs (the MPS root): no host dir
                       "sharedHostDirs": []}
    stubs = str(lay.fake_stub_dir)
    values["kubeletPlugin"] = {
        # Helm merges maps: the chart's own selector (gpu: "on") stays, and `up` labels the node so.
        "nodeSelector": {"kubernetes.io/hostname": name},
        "env": [*(chart_plugin_default(chart, "env") or []), {"name": STUB_DIR_ENV, "value": stubs}],
        "extraVolumes": [{"name": "fake-stubs", "hostPath": {"path": stubs, "type": "DirectoryOrCreate"}}],
        "extraVolumeMounts": [{"name": "fake-stubs", "mountPath": stubs}],
    }
    return values


def chart_labels() -> dict[str, str]:
    """What a user does before `helm install` (`kubectl label node NODE gpu=on`): the labels the
    driver charts' default node selectors want, read from this checkout's charts."""
    labels: dict[str, str] = {}
    for chart in VALUES_CHARTS:
        selector = chart_plugin_default(chart, "nodeSelector")
        if isinstance(selector, dict):
            labels.update({str(k): str(v) for k, v in selector.items()})
    return labels


def chart_plugin_default(chart: str, key: str) -> Any:
    """The chart's own `kubeletPlugin.<key>` from this checkout (a values list replaces the
    chart's whole; a map merges into it), None where unknown."""
    import yaml

    from dra_dev.node.project_image import project_root

    try:
        values = yaml.safe_load((project_root() / "helm" / chart / "values.yaml").read_text())
    except (OSError, UserError, yaml.YAMLError):
        return None
    return (values.get("kubeletPlugin") or {}).get(key)

