"""`dra demo`: the whole claim path on an embedded control plane, with no hardware.

The tour, for the driver asked for (``--driver``, by default hami-core-gpu), each step by the
real part:
1. starts (or reuses) the embedded control plane (`dra cluster up`);
2. runs the driver's scenario (`dra_dev.demo.scenario`, the data of its examples/DIR/demo.yaml):
   fake nodes, one node daemon each with the driver's fake backend, its examples applied with
   kubectl and allocated by kube-scheduler, every claim prepared over the daemon's socket by a
   played kubelet and one workload per device started with the claim's CDI edits, held to its
   share by the real hook, and `dra top --once` showing them from the slices, claims and /metrics;
3. one heterogeneous claim (`dra_dev.demo.heterogeneous`): a request per driver of
   examples/heterogeneous/demo.yaml on one node running each driver's daemon, every workload
   held to its own share in the one container;
4. two claims sharing one device on a real kubelet + containerd node (`dra_dev.demo.real_node`),
   where one starts here and the scenario suits it (``--node auto``, the default; ``real``:
   fail without one; ``harness``: skip it);
5. says what it leaves running (the control plane) and how to stop it.
"""

from __future__ import annotations

from pathlib import Path

from dra.errors import UserError
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.demo.console import progress, say, step
from dra_dev.demo.heterogeneous import run_heterogeneous
from dra_dev.demo.housekeeping import left_running
from dra_dev.demo.real_node import real_node_demo
from dra_dev.demo.scenario import load_scenario, run_scenario, scenario_files

NODE_MODES = ("auto", "real", "harness")


def run_demo(directory: Path, k8s_version: str, driver_entry: str = "hami-core-gpu", keep: bool = False,
             workload: Path | None = None, node_mode: str = "auto") -> int:
    """The tour for `driver_entry` on the control plane in `directory`; the exit status."""
    if node_mode not in NODE_MODES:
        raise UserError(f"--node {node_mode!r}: expected {', '.join(NODE_MODES)}")
    scenario = load_scenario(driver_entry)
    if scenario is None:
        known = ", ".join(scenario_files()) or "none (the checkout's examples/ are missing)"
        raise UserError(f"--driver {driver_entry}: no demo scenario names it (examples/*/demo.yaml); "
                        f"drivers with one: {known}")
    if node_mode == "real" and not scenario.real_node:
        raise UserError(f"--node real: the scenario of {driver_entry} has realNode: false (the real node's"
                        " workload image does not suit its devices); use --node harness")
    step(f"control plane (Kubernetes {k8s_version}) in {directory}")
    cp = ControlPlane(directory, k8s_version)
    health = cp.up(progress=progress)
    say(f"    ready: {health.version} at {cp.server}; export KUBECONFIG={cp.kubeconfig}")
    rc = run_scenario(cp, scenario, workload, keep, epilogue=False)
    rc = rc or run_heterogeneous(cp, keep=keep)
    if node_mode != "harness" and scenario.real_node and not rc:
        rc = real_node_demo(cp, scenario.driver_entry, keep=keep, required=node_mode == "real",
                            daemon_args=scenario.daemon_args) or 0
    say(left_running(cp, keep, None))
    return rc
