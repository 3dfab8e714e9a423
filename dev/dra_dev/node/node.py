"""A real node joined to the embedded control plane: containerd (CDI on, runc, a CNI bridge)
and an upstream kubelet, started from the pinned binaries by `dra node up`.

Like the control plane, the processes run in their own sessions and outlive the command;
`<dir>/node.json` records their PIDs and binaries, and `down` signals only PIDs that still run
the binary recorded for them. kubelet registers as `system:node:<name>` with a client
certificate of the cluster CA (the Node authorizer and NodeRestriction apply, as on a real
cluster); a new Node gets the `node.kubernetes.io/not-ready:NoSchedule` taint from admission,
and because the embedded control plane runs no node-lifecycle controller (its other nodes have
no kubelet), `up` lifts that one taint once the kubelet reports Ready, as that controller would.

When the control plane serves pods (`dra cluster up`'s default: ServiceAccount tokens, the
`kubernetes` Service at this host's address), the node also runs kube-proxy (iptables mode, as
`system:kube-proxy`), the Service network a kubeadm node has, and imports the project's image
from `make image`; `helm_values` is what the charts need to run on it.

The node's state file and status are in `state`, its network on the host (subnet, bridge, ports)
in `network`, its cgroups, mounts and shims in `host`, the charts' values in `chart_values`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dra._runtime.wait import until
from dra.errors import UserError
from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION
from dra_dev.cluster.certs import issue_client_cert
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.cluster.controlplane import default_dir as default_cluster_dir
from dra_dev.cluster.processes import Processes, ProcessRecord, pid_runs
from dra_dev.node import chart_values, host, network
from dra_dev.node import config as cfg
from dra_dev.node.binaries import RUNC_HINT, NodeBinaries, build_node, find_runc, node_binaries
from dra_dev.node.images import BuiltImage, build_images, import_images
from dra_dev.node.project_image import built_project_image
from dra_dev.node.state import (
    DEFAULT_NODE_NAME,
    NOT_READY_TAINT,
    PROCESSES,
    SERVICE_PROCESSES,
    NodeState,
    NodeStatus,
    default_node_dir,
)


def unavailable_reason() -> str | None:
    """Why a real node cannot start on this machine (None: it can); each reason says the fix."""
    if os.geteuid() != 0:
        return ("a real node needs root (containerd and runc create namespaces, cgroups and a bridge); "
                "run it as root.")
    if find_runc() is None:
        return f"runc is not installed. {RUNC_HINT}"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is missing; install it (Debian: apt-get install -y iproute2, or make node-deps)."
    return None


class RealNode:
    """One node rooted at `directory`, joined to the control plane in `cluster_dir`."""

    def __init__(self, directory: Path | None = None, name: str | None = None, cluster_dir: Path | None = None,
                 settings: cfg.MachineSettings | None = None) -> None:
        self.directory = (directory or default_node_dir(name or DEFAULT_NODE_NAME)).resolve()
        self.layout = cfg.NodeLayout(self.directory)
        existing = self.state
        if existing and name and name != existing.name:
            raise UserError(f"the node in {self.directory} is named {existing.name}, not {name}; pick another --dir "
                            f"or run `dra node down --dir {self.directory} --purge` first.")
        self.name = cfg.validate_node_name(name or (existing.name if existing else DEFAULT_NODE_NAME))
        self.cluster_dir = (cluster_dir or (Path(existing.cluster_dir) if existing else default_cluster_dir())).resolve()
        self.settings = settings or cfg.MachineSettings.detect()
        self._procs = Processes(self.directory)

    # --- views -----------------------------------------------------------------------------
    @property
    def state(self) -> NodeState | None:
        return NodeState.load(self.layout.state_file)

    @property
    def control_plane(self) -> ControlPlane:
        st = ControlPlane(self.cluster_dir).state
        return ControlPlane(self.cluster_dir, st.k8s_version if st else DEFAULT_K8S_VERSION)

    @property
    def bins(self) -> NodeBinaries:
        return node_binaries(self.control_plane.k8s_version)

    def directories(self) -> dict[str, Path]:
        """The paths a node daemon (`dra run`) and a user need."""
        lay = self.layout
        return {"plugin dir": lay.plugin_dir, "registry dir": lay.registry_dir, "CDI dir": lay.cdi_dir,
                "containerd socket": lay.containerd_socket, "kubelet root": lay.kubelet_root,
                "pod logs": lay.pod_logs, "logs": lay.logs}

    def daemon_args(self) -> list[str]:
        """`dra run DRIVER` arguments that make a daemon serve this node's kubelet."""
        lay = self.layout
        return ["--node-name", self.name, "--kubeconfig", str(self.control_plane.kubeconfig),
                "--plugin-dir", str(lay.plugin_dir), "--registrar-dir", str(lay.registry_dir),
                "--cdi-dir", str(lay.cdi_dir)]

    def crictl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        endpoint = f"unix://{self.layout.containerd_socket}"
        return subprocess.run([str(self.bins.crictl), "--runtime-endpoint", endpoint, "--image-endpoint", endpoint,
                               "--timeout", "20s", *args], capture_output=True, text=True, timeout=timeout)

    def container_spec(self, namespace: str, pod: str) -> dict[str, Any]:
        """The OCI runtime spec containerd gave the pod's (one) container: its CDI edits applied."""
        proc = self.crictl("ps", "-a", "-o", "json", "--label", f"io.kubernetes.pod.namespace={namespace}",
                           "--label", f"io.kubernetes.pod.name={pod}")
        containers = json.loads(proc.stdout)["containers"] if proc.returncode == 0 else []
        if len(containers) != 1:
            raise UserError(f"expected one container of pod {namespace}/{pod} on node {self.name}, found "
                            f"{len(containers)} ({proc.stderr.strip()})")
        inspect = self.crictl("inspect", containers[0]["id"])
        if inspect.returncode != 0:
            raise UserError(f"crictl inspect failed for pod {namespace}/{pod}: {inspect.stderr.strip()}")
        return dict(json.loads(inspect.stdout)["info"]["runtimeSpec"])

    # --- lifecycle -------------------------------------------------------------------------
    def up(self, timeout: float = 120.0, progress: Callable[[str], None] = lambda _m: None) -> NodeStatus:
        """Start what is not running, wait for Ready, lift the not-ready taint; idempotent."""
        reason = unavailable_reason()
        if reason:
            raise UserError(reason)
        cp = self.control_plane
        if not cp.health().ready:
            raise UserError(f"no control plane answers in {self.cluster_dir}; start it with "
                            f"`dra cluster up --dir {self.cluster_dir}` (or pass --cluster-dir).")
        runc = find_runc()
        assert runc is not None
        bins = self.bins
        if not bins.complete():
            build_node(cp.k8s_version, progress=progress)
        state = self.state
        service_network = cp.pod_access
        if (state is not None and state.service_network == service_network
                and all(p in state.processes and pid_runs(state.processes[p]) for p in state.process_names)):
            progress("already running")
            project = built_project_image() if service_network else None
            if project is not None and project.digest != state.image_digest:
                progress(f"importing {project.reference} ({project.digest[:19]}, rebuilt by `make image`)")
                self._import_project_image(state, bins, project)
            return self._wait_ready(state, timeout, progress)
        if state is not None:
            # One of them died (a crash, a kill): restart them all but keep the pods. containerd
            # reconnects to the shims of running containers and kubelet reconciles its pods.
            for name in SERVICE_PROCESSES:
                self._stop_one(state, name)
        state = self._prepare(state, runc, bins, cp)
        try:
            progress("starting containerd")
            self._start_containerd(state, runc, bins)
            progress("importing the pause and workload images")
            import_images(bins.containerd("ctr"), self.layout.containerd_socket, build_images(self.layout.images))
            project = built_project_image() if service_network else None
            if project is not None:
                progress(f"importing {project.reference} ({project.archive})")
                self._import_project_image(state, bins, project)
            progress(f"starting kubelet {cp.k8s_version} as node {self.name}")
            self._start(state, "kubelet", bins.kubelet, self._kubelet_args(state))
            if service_network:
                # After kubelet: kube-proxy waits for its Node object (the node's addresses).
                progress("starting kube-proxy (iptables mode): the Service network")
                self._start_kube_proxy(state, bins)
            status = self._wait_ready(state, timeout, progress)
            if service_network:
                self._wait_kube_proxy_synced(state)
                labels = self._label_for_charts()
                if labels:
                    progress(f"labelled node {self.name} {', '.join(f'{k}={v}' for k, v in labels.items())} "
                             "(the driver charts' node selectors)")
            return status
        except UserError:
            self._stop(state)
            raise

    def down(self, delete_node: bool = True, purge: bool = False) -> list[str]:
        """Stop kubelet, the pods, containerd; remove the bridge and cgroups; keep files unless `purge`."""
        state = self.state
        stopped: list[str] = []
        if state is not None:
            stopped = self._stop(state)
            state.processes.clear()
            state.save(self.layout.state_file)
            if delete_node:
                self._delete_node_object()
        if purge and self.directory.exists():
            self._unmount_all()
            shutil.rmtree(self.directory, ignore_errors=True)
        return stopped

    def restart_kubelet(self, progress: Callable[[str], None] = lambda _m: None) -> None:
        """Stop kubelet and start it again with the same configuration (pods keep running)."""
        state = self._require_state()
        self._stop_one(state, "kubelet")
        self._start(state, "kubelet", self.bins.kubelet, self._kubelet_args(state))
        progress("kubelet restarted")

    def status(self) -> NodeStatus:
        state = self.state
        names = state.process_names if state else PROCESSES
        running = {p: bool(state and p in state.processes and pid_runs(state.processes[p])) for p in names}
        registered, ready, message, taints = False, False, "no Node object", []
        with contextlib.suppress(Exception):
            node = self._read_node()
            if node is not None:
                registered = True
                for c in node.status.conditions or []:
                    if c.type == "Ready":
                        ready, message = c.status == "True", f"{c.reason}: {c.message}"
                taints = [f"{t.key}:{t.effect}" for t in node.spec.taints or []]
        return NodeStatus(self.name, running, registered, ready, message, taints, self.directories())

    # --- steps of `up` ---------------------------------------------------------------------
    def _require_state(self) -> NodeState:
        state = self.state
        if state is None:
            raise UserError(f"no node in {self.directory} (run `dra node up --dir {self.directory}`)")
        return state

    def _prepare(self, old: NodeState | None, runc: Path, bins: NodeBinaries, cp: ControlPlane) -> NodeState:
        lay = self.layout
        for d in (lay.logs, lay.containerd_root, lay.containerd_state, lay.runc_root, lay.cdi_dir, lay.cni_conf_dir,
                  lay.cni_ipam_dir, lay.kubelet_root, lay.pki, lay.pod_logs, lay.images):
            d.mkdir(parents=True, exist_ok=True)
        for d in (lay.hook_dir, lay.fake_stub_dir):
            d.mkdir(parents=True, exist_ok=True)
        kubelet_port, healthz_port, proxy_healthz, proxy_metrics = network.free_ports(4)
        state = NodeState(
            name=self.name, cluster_dir=str(self.cluster_dir), k8s_version=cp.k8s_version,
            kubelet_port=kubelet_port, healthz_port=healthz_port,
            subnet=old.subnet if old else network.pick_subnet(self.directory),
            bridge=cfg.bridge_name(self.directory), cgroup_root=cfg.cgroup_root(self.name, self.directory),
            service_network=cp.pod_access, proxy_ports=[proxy_healthz, proxy_metrics],
        )
        if state.service_network:
            network.check_service_network_free()
            pcert, pkey = lay.pki / "kube-proxy.crt", lay.pki / "kube-proxy.key"
            # The default ClusterRoleBinding system:node-proxier binds this user.
            issue_client_cert(cp.pki, pcert, pkey, "system:kube-proxy")
            lay.kube_proxy_kubeconfig.write_text(cfg.kubeconfig(cp.server, cp.pki.ca_cert, pcert, pkey, "system:kube-proxy"))
            lay.kube_proxy_kubeconfig.chmod(0o600)
            lay.kube_proxy_config.write_text(cfg.kube_proxy_config(
                lay, node_name=self.name, healthz_port=proxy_healthz, metrics_port=proxy_metrics, settings=self.settings))
        cert, key = lay.pki / "kubelet-client.crt", lay.pki / "kubelet-client.key"
        issue_client_cert(cp.pki, cert, key, f"system:node:{self.name}", "system:nodes")
        lay.kubeconfig.write_text(cfg.kubeconfig(cp.server, cp.pki.ca_cert, cert, key, f"system:node:{self.name}"))
        lay.kubeconfig.chmod(0o600)
        lay.containerd_config.write_text(cfg.containerd_config(lay, runc, bins.cni_dir, self.settings))
        for old_conf in lay.cni_conf_dir.glob("*.conflist"):
            old_conf.unlink()
        (lay.cni_conf_dir / "10-dra.conflist").write_text(
            cfg.cni_conflist(f"dra-{self.name}", state.bridge, state.subnet, lay.cni_ipam_dir))
        lay.kubelet_config.write_text(cfg.kubelet_config(
            lay, ca_cert=cp.pki.ca_cert, address=state.node_ip, port=state.kubelet_port, healthz_port=state.healthz_port,
            cgroup=state.cgroup_root, settings=self.settings))
        host.make_cgroup_root(state.cgroup_root)
        network.ensure_bridge(state.bridge, state.node_ip, state.subnet)
        state.save(lay.state_file)
        return state

    def _kubelet_args(self, state: NodeState) -> list[str]:
        lay = self.layout
        return [f"--config={lay.kubelet_config}", f"--kubeconfig={lay.kubeconfig}", f"--root-dir={lay.kubelet_root}",
                f"--cert-dir={lay.kubelet_root / 'pki'}", f"--hostname-override={self.name}", f"--node-ip={state.node_ip}",
                "--v=2"]

    def _import_project_image(self, state: NodeState, bins: NodeBinaries, image: BuiltImage) -> None:
        import_images(bins.containerd("ctr"), self.layout.containerd_socket, [image])
        state.image, state.image_digest = image.reference, image.digest
        state.save(self.layout.state_file)

    def _start_kube_proxy(self, state: NodeState, bins: NodeBinaries) -> None:
        env = {**os.environ, "PATH": f"{os.environ.get('PATH', '/usr/bin:/bin')}:/usr/sbin:/sbin"}
        self._start(state, "kube-proxy", bins.kube_proxy, [f"--config={self.layout.kube_proxy_config}", "--v=2"], env)

    def _wait_kube_proxy_synced(self, state: NodeState) -> None:
        url = f"http://127.0.0.1:{state.proxy_ports[0]}/healthz"

        def synced() -> bool:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)

        self._wait(state, "kube-proxy", synced, 60, what="kube-proxy's first sync of the Service rules")

    def helm_values(self, chart: str = "hami-core-gpu") -> dict[str, Any]:
        """A values file for `chart` on this node (`chart_values.helm_values`)."""
        return chart_values.helm_values(chart, self.name, self.directory, self._require_state(), self.layout)

    def _start_containerd(self, state: NodeState, runc: Path, bins: NodeBinaries) -> None:
        env = {**os.environ, "PATH": f"{bins.containerd_dir}:{runc.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        self._start(state, "containerd", bins.containerd(), ["--config", str(self.layout.containerd_config)], env)
        ctr = [str(bins.containerd("ctr")), "--address", str(self.layout.containerd_socket), "version"]
        self._wait(state, "containerd", lambda: subprocess.run(ctr, capture_output=True).returncode == 0, 30)

    def _wait_ready(self, state: NodeState, timeout: float, progress: Callable[[str], None]) -> NodeStatus:
        def ready() -> bool:
            node = self._read_node()
            return bool(node and any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []))

        self._wait(state, "kubelet", ready, timeout, what=f"node {self.name} to become Ready")
        if self._lift_not_ready_taint():
            progress(f"lifted the {NOT_READY_TAINT} taint (the embedded control plane runs no node-lifecycle controller)")
        return self.status()

    # --- API helpers -----------------------------------------------------------------------
    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.control_plane.api_client())

    def _read_node(self) -> Any:
        from kubernetes.client.exceptions import ApiException

        core = self._core()
        try:
            return core.read_node(self.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        finally:
            core.api_client.close()

    def _lift_not_ready_taint(self) -> bool:
        core = self._core()
        try:
            node = core.read_node(self.name)
            taints = node.spec.taints or []
            keep = [t for t in taints if t.key != NOT_READY_TAINT]
            if len(keep) == len(taints):
                return False
            body = {"metadata": {"resourceVersion": node.metadata.resource_version},
                    "spec": {"taints": [core.api_client.sanitize_for_serialization(t) for t in keep] or None}}
            core.patch_node(self.name, body)
            return True
        finally:
            core.api_client.close()

    def _label_for_charts(self) -> dict[str, str]:
        """The labels the driver charts' node selectors want (`chart_values.chart_labels`), on this node."""
        labels = chart_values.chart_labels()
        if labels:
            core = self._core()
            try:
                core.patch_node(self.name, {"metadata": {"labels": labels}})
            finally:
                core.api_client.close()
        return labels

    def _delete_node_object(self) -> None:
        from kubernetes.client.exceptions import ApiException

        with contextlib.suppress(Exception):
            core = self._core()
            try:
                core.delete_node(self.name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            finally:
                core.api_client.close()

    # --- processes -------------------------------------------------------------------------
    def _start(self, state: NodeState, name: str, binary: Path, args: list[str], env: dict[str, str] | None = None) -> None:
        state.processes[name] = self._procs.start(name, binary, args, self.layout.log(name), env, fix="run `dra node build`.")
        state.save(self.layout.state_file)

    def _alive(self, name: str, rec: ProcessRecord | None) -> bool:
        return self._procs.alive(name, rec)

    def _wait(self, state: NodeState, name: str, check: Callable[[], bool], timeout: float, what: str = "") -> None:
        def answered() -> bool:
            with contextlib.suppress(Exception):
                if check():
                    return True
            if not self._alive(name, state.processes.get(name)):
                raise UserError(f"{name} exited while {what or 'starting'}; last lines of {self.layout.log(name)}:\n"
                                + _tail(self.layout.log(name)))
            return False

        def timed_out(message: str) -> UserError:
            return UserError(f"{message}; read {self.layout.log(name)} (last lines:\n{_tail(self.layout.log(name))})")

        until(answered, timeout=timeout, interval=0.3, what=what or name + " to answer", error=timed_out)

    def _stop_one(self, state: NodeState, name: str, grace: float = 15) -> bool:
        return self._procs.stop(name, state.processes.get(name), grace)

    def _stop(self, state: NodeState) -> list[str]:
        """kubelet first (so it restarts nothing), then every pod, then containerd and its shims."""
        stopped = ["kubelet"] if self._stop_one(state, "kubelet") else []
        if self._alive("containerd", state.processes.get("containerd")):
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                self.crictl("rmp", "--force", "--all", timeout=90)
        if self._stop_one(state, "kube-proxy"):
            stopped.append("kube-proxy")
        if state.service_network:
            # kube-proxy's own clean-up: its KUBE-* chains and rules leave the host's tables.
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                subprocess.run([str(self.bins.kube_proxy), "--cleanup", f"--config={self.layout.kube_proxy_config}"],
                               capture_output=True, timeout=60)
        if self._stop_one(state, "containerd"):
            stopped.append("containerd")
        self._kill_shims()
        host.kill_cgroup_members(state.cgroup_root)  # containers whose containerd and shim died before `down`
        self._unmount_all()
        network.delete_bridge(state.bridge)
        host.remove_cgroup_root(state.cgroup_root)
        return stopped

    def _kill_shims(self) -> None:
        host.kill_shims(self.bins.containerd("containerd-shim-runc-v2"), self.layout.containerd_socket)

    def _unmount_all(self) -> None:
        host.unmount_under(self.directory)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
