"""An embedded Kubernetes control plane on loopback: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, started from the pinned binaries with the DRA feature gates on.

Used by `dra cluster up|status|down`, the pytest fixture and the demo, so all three run the same
code. Processes run in their own sessions (they outlive the command that started them); their
PIDs and command lines are recorded in `<dir>/cluster.json`, and `down` signals only processes
whose PID still runs the binary recorded for it, so it never touches anything it did not start.

Most nodes are Node objects created by tests or the demo, with no kubelet. For that reason the
node-lifecycle controller is off (it would taint every node without heartbeats NotReady) and,
by default, the ServiceAccount admission plugin is off (no token volumes; a pod made right after
its namespace would race the `default` ServiceAccount), as in controller-runtime's envtest.
With `pod_access` (`dra cluster up`'s default) the control plane serves pods as a kubeadm one
does: ServiceAccount admission and projected tokens, and the API server listening beyond
loopback, advertised at this host's address in the `kubernetes` Service (pods reach it through
a real node's kube-proxy). A real node (`dra node up`, dra_dev.node) joins as kubelets do: a client certificate of the
cluster CA for `system:node:<name>`, authorized by the Node authorizer and NodeRestriction; the
API server reaches its kubelet on 127.0.0.1 with the admin certificate.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dra._runtime.wait import until
from dra.errors import UserError
from dra_dev.cluster.binaries import DEFAULT_K8S_VERSION, BinarySet, binary_set, build
from dra_dev.cluster.certs import PKI, write_pki
from dra_dev.cluster.processes import Processes, ProcessRecord, save_state
from dra_dev.cluster.processes import pid_runs as _pid_runs

FEATURE_GATES = (
    "DRAConsumableCapacity",
    "DRAExtendedResource",
    "DRADeviceTaints",
    "DRAPartitionableDevices",
    "ResourceHealthStatus",
)
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")


def default_dir() -> Path:
    env = os.environ.get("DRA_CLUSTER_DIR")
    return Path(env).expanduser() if env else Path.home() / ".local" / "share" / "dra" / "cluster"


@dataclass
class Ports:
    """Loopback ports; the defaults avoid the well-known ports of a real cluster on the same host."""

    etcd: int = 12379
    etcd_peer: int = 12380
    apiserver: int = 16443
    scheduler: int = 20259
    controller_manager: int = 20257

    @classmethod
    def free(cls) -> Ports:
        """Ports the kernel says are free now (for tests running beside a user's cluster)."""
        socks = []
        try:
            for _ in range(5):
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                socks.append(s)
            return cls(*(s.getsockname()[1] for s in socks))
        finally:
            for s in socks:
                s.close()


@dataclass
class ClusterState:
    k8s_version: str
    ports: Ports
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    # The API server serves pods (ServiceAccount admission, tokens, an address pods reach).
    pod_access: bool = False
    advertise_address: str = "127.0.0.1"

    @classmethod
    def load(cls, path: Path) -> ClusterState | None:
        try:
            raw = json.loads(path.read_text())
            return cls(
                k8s_version=raw["k8s_version"],
                ports=Ports(**raw["ports"]),
                processes={k: ProcessRecord(**v) for k, v in raw.get("processes", {}).items()},
                pod_access=bool(raw.get("pod_access", False)),
                advertise_address=str(raw.get("advertise_address", "127.0.0.1")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, path: Path) -> None:
        save_state(path, self)


def host_address() -> str:
    """This host's address on its default route (what kubeadm advertises); pods reach it through
    their node's bridge, since it is local to the host. No packet is sent (a UDP connect)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # TEST-NET-3: only the route is looked up
            address = str(s.getsockname()[0])
        except OSError as exc:
            raise UserError("this host has no IPv4 route beyond loopback, so pods could not reach the API "
                            "server; start the control plane with --no-pod-access (no ServiceAccount tokens), "
                            f"or give the host an address ({exc}).") from exc
    if address.startswith("127."):
        raise UserError(f"this host's route address is the loopback {address}; pods cannot reach it. "
                        "Use --no-pod-access or give the host a non-loopback address.")
    return address


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Health:
    """What `status` reports."""

    running: dict[str, bool]
    ready: bool
    leaders: dict[str, str]
    version: str | None

    @property
    def healthy(self) -> bool:
        return all(self.running.values()) and self.ready and all(self.leaders.values())


class ControlPlane:
    """One embedded control plane rooted at `directory`."""

    def __init__(self, directory: Path | None = None, k8s_version: str = DEFAULT_K8S_VERSION,
                 ports: Ports | None = None, bins: BinarySet | None = None, pod_access: bool | None = None) -> None:
        self.directory = (directory or default_dir()).resolve()
        self.k8s_version = k8s_version
        self._pod_access = pod_access
        self._ports = ports
        self.bins = bins or binary_set(k8s_version)
        self.pki = PKI(self.directory / "pki")
        self._procs = Processes(self.directory)

    # --- paths ---------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.directory / "cluster.json"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    def log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    @property
    def state(self) -> ClusterState | None:
        return ClusterState.load(self.state_file)

    @property
    def ports(self) -> Ports:
        st = self.state
        if st is not None:
            return st.ports
        return self._ports or Ports()

    @property
    def pod_access(self) -> bool:
        """Whether pods are served (as asked; else as the running cluster was started; else off)."""
        if self._pod_access is not None:
            return self._pod_access
        st = self.state
        return bool(st and st.pod_access)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    # --- lifecycle -----------------------------------------------------------------------
    def up(self, timeout: float = 180.0, progress: Callable[[str], None] = lambda _m: None) -> Health:
        """Start what is not running and wait until healthy; a healthy cluster is left as is."""
        existing = self.state
        if existing is not None:
            # Another version on a stopped cluster is an in-place upgrade (or downgrade): the same
            # etcd data, certificates and ports, the other binaries. A running one is not replaced.
            if existing.k8s_version != self.k8s_version and any(_pid_runs(r) for r in existing.processes.values()):
                raise UserError(
                    f"the cluster in {self.directory} runs Kubernetes {existing.k8s_version}, not "
                    f"{self.k8s_version}; run `dra cluster down --dir {self.directory}` first (its data is kept:"
                    " `up` then starts it at the other version) or pick another --dir."
                )
            if self._pod_access is not None and existing.pod_access != self._pod_access and existing.processes:
                want, have = ("with", "without") if self.pod_access else ("without", "with")
                raise UserError(
                    f"the cluster in {self.directory} runs {have} pod access (ServiceAccount tokens, the "
                    f"kubernetes Service); asked {want}. Run `dra cluster down --dir {self.directory}` first "
                    "(pass --pod-access/--no-pod-access as you want it) or pick another --dir."
                )
            if all(_pid_runs(r) for r in existing.processes.values()) and len(existing.processes) == 4:
                health = self.wait_healthy(timeout)
                progress("already running")
                return health
            self._stop(existing)  # partial leftovers from a crash: restart cleanly
        if not self.bins.complete():
            build(self.k8s_version, progress=progress)
        ports = self._ports or (existing.ports if existing else Ports())
        for name, port in asdict(ports).items():
            if not _port_free(port):
                raise UserError(
                    f"port {port} on 127.0.0.1 (for {name.replace('_', '-')}) is already in use by another "
                    f"process, so the control plane cannot start. Stop that process (`ss -ltnp 'sport = :{port}'` "
                    "shows it), or choose another --dir whose cluster.json names free ports."
                )
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "logs").mkdir(exist_ok=True)
        write_pki(self.pki.directory)
        self._write_kubeconfig(ports)
        state = ClusterState(self.k8s_version, ports, pod_access=self.pod_access,
                             advertise_address=host_address() if self.pod_access else "127.0.0.1")
        state.save(self.state_file)
        try:
            progress("starting etcd")
            self._start(state, "etcd", self._etcd_args(ports))
            self._wait(lambda: self._etcd_healthy(ports), 30, "etcd")
            progress("starting kube-apiserver")
            self._start(state, "kube-apiserver", self._apiserver_args(ports, state))
            self._wait(self._ready, 90, "kube-apiserver")
            progress("starting kube-scheduler and kube-controller-manager")
            self._start(state, "kube-scheduler", self._scheduler_args(ports))
            self._start(state, "kube-controller-manager", self._controller_manager_args(ports))
            health = self.wait_healthy(timeout)
            if state.pod_access:
                # ServiceAccount admission refuses a pod whose ServiceAccount does not exist yet.
                self._wait(self._default_service_account, 60, "kube-controller-manager")
            return health
        except UserError:
            self._stop(state)
            raise

    def down(self) -> list[str]:
        """Stop the processes this directory's `up` started; returns their names."""
        state = self.state
        if state is None:
            return []
        stopped = self._stop(state)
        state.processes.clear()
        state.save(self.state_file)
        return stopped

    def health(self) -> Health:
        state = self.state
        running = {c: bool(state and c in state.processes and _pid_runs(state.processes[c])) for c in COMPONENTS}
        ready = running["kube-apiserver"] and self._ready()
        leaders = {c: (self._leader(c) if ready else "") for c in ("kube-scheduler", "kube-controller-manager")}
        version = None
        if ready:
            with contextlib.suppress(Exception):
                version = json.loads(self._get("/version"))["gitVersion"]
        return Health(running, ready, leaders, version)

    def wait_healthy(self, timeout: float = 120.0) -> Health:
        last: list[Health] = []

        def healthy() -> Health | None:
            health = self.health()
            last[:] = [health]
            if health.healthy:
                return health
            state = self.state
            for name, rec in (state.processes.items() if state else []):
                if not self._alive(name, rec):
                    raise UserError(
                        f"{name} exited while the control plane was starting; read {rec.log} for the reason."
                    )
            return None

        def unhealthy(message: str) -> UserError:
            health = last[0]
            missing = [c for c, ok in health.running.items() if not ok]
            missing += [c + " (not leading)" for c, who in health.leaders.items() if not who]
            if not health.ready:
                missing.append("kube-apiserver (/readyz not ok)")
            return UserError(f"the control plane in {self.directory} did not become healthy ({message}): "
                             f"{', '.join(missing)}; read the logs in {self.directory / 'logs'}.")

        return until(healthy, timeout=timeout, interval=0.5, what="every component", error=unhealthy)

    # --- api helpers -----------------------------------------------------------------------
    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` for the admin user."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return ctx

    def _get(self, path: str, timeout: float = 3.0) -> str:
        url = f"https://127.0.0.1:{self.ports.apiserver}{path}"
        with urllib.request.urlopen(url, context=self._ssl(), timeout=timeout) as resp:
            return str(resp.read().decode())

    def _ready(self) -> bool:
        try:
            return self._get("/readyz").strip() == "ok"
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    def _default_service_account(self) -> bool:
        try:
            return bool(json.loads(self._get("/api/v1/namespaces/default/serviceaccounts/default")).get("metadata"))
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def _leader(self, component: str) -> str:
        try:
            lease = json.loads(self._get(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{component}"))
        except (OSError, urllib.error.URLError, ValueError):
            return ""
        return str(lease.get("spec", {}).get("holderIdentity") or "")

    @staticmethod
    def _etcd_healthy(ports: Ports) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ports.etcd}/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, urllib.error.URLError, ValueError):
            return False

    # --- processes -------------------------------------------------------------------------
    def _start(self, state: ClusterState, name: str, args: list[str]) -> None:
        state.processes[name] = self._procs.start(name, self.bins.path(name), args, self.log(name),
                                                  fix="run `dra cluster build`.")
        state.save(self.state_file)

    def _alive(self, name: str, rec: ProcessRecord | None) -> bool:
        return self._procs.alive(name, rec)

    def _wait(self, check: Callable[[], bool], timeout: float, name: str) -> None:
        def healthy() -> bool:
            if check():
                return True
            rec = self.state.processes.get(name) if self.state else None
            if not self._alive(name, rec):
                raise UserError(f"{name} failed to start: it exited; read {self.log(name)} for the reason.")
            return False

        until(healthy, timeout=timeout, interval=0.2, what=f"{name} to become healthy",
              error=lambda m: UserError(f"{name} did not become healthy: {m}; read {self.log(name)}."))

    def _stop(self, state: ClusterState) -> list[str]:
        return [name for name in reversed(COMPONENTS) if self._procs.stop(name, state.processes.get(name))]

    # --- configuration -----------------------------------------------------------------------
    def _gates(self) -> str:
        return "--feature-gates=" + ",".join(f"{g}=true" for g in FEATURE_GATES)

    def _write_kubeconfig(self, ports: Ports) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "dra", "cluster": {
                "server": f"https://127.0.0.1:{ports.apiserver}",
                "certificate-authority": str(self.pki.ca_cert)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(self.pki.admin_cert),
                "client-key": str(self.pki.admin_key)}}],
            "contexts": [{"name": "dra", "context": {"cluster": "dra", "user": "admin"}}],
            "current-context": "dra",
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _etcd_args(self, p: Ports) -> list[str]:
        return [
            "--name=dra-embedded",
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{p.etcd}",
            f"--advertise-client-urls=http://127.0.0.1:{p.etcd}",
            f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
            f"--initial-cluster=dra-embedded=http://127.0.0.1:{p.etcd_peer}",
            "--listen-metrics-urls=",
            # A throw-away test store: durability across power loss is not worth the fsync cost.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_args(self, p: Ports, state: ClusterState) -> list[str]:
        k = self.pki
        if state.pod_access:
            # Pods reach the API server as on kubeadm: the `kubernetes` Service's endpoint is this
            # host's address (kept by the lease reconciler), so the server listens beyond loopback
            # (every request still needs a client certificate or a token of this cluster).
            reach = ["--bind-address=0.0.0.0", f"--advertise-address={state.advertise_address}",
                     "--endpoint-reconciler-type=lease", "--enable-admission-plugins=NodeRestriction,ServiceAccount"]
        else:
            # No kubelet and no Service network here; newer apiservers also refuse a loopback
            # address for the `kubernetes` Service endpoints, so that reconciler is off.
            reach = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
                     "--enable-admission-plugins=NodeRestriction", "--disable-admission-plugins=ServiceAccount"]
        return [
            f"--etcd-servers=http://127.0.0.1:{p.etcd}",
            *reach,
            f"--secure-port={p.apiserver}",
            f"--cert-dir={self.directory / 'apiserver-certs'}",
            f"--tls-cert-file={k.serving_cert}",
            f"--tls-private-key-file={k.serving_key}",
            f"--client-ca-file={k.ca_cert}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={k.sa_pub}",
            f"--service-account-signing-key-file={k.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=Node,RBAC",
            # For `kubectl logs/exec` on a real node: kubelet authorizes this user by webhook.
            f"--kubelet-client-certificate={k.admin_cert}",
            f"--kubelet-client-key={k.admin_key}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--allow-privileged=true",
            # DeviceTaintRule (DRADeviceTaints) is served only by v1alpha3; the scheduler watches it.
            "--runtime-config=resource.k8s.io/v1alpha3=true,resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true",
            "--profiling=false",
            self._gates(),
            "--v=1",
        ]

    def _component_args(self, name: str, port: int) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.directory / (name + '-certs')}",
            "--leader-elect=true",
            self._gates(),
            "--v=1",
        ]

    def _scheduler_args(self, p: Ports) -> list[str]:
        return self._component_args("kube-scheduler", p.scheduler)

    def _controller_manager_args(self, p: Ports) -> list[str]:
        k = self.pki
        return [
            *self._component_args("kube-controller-manager", p.controller_manager),
            f"--service-account-private-key-file={k.sa_key}",
            f"--root-ca-file={k.ca_cert}",
            f"--cluster-signing-cert-file={k.ca_cert}",
            f"--cluster-signing-key-file={k.ca_key}",
            "--controllers=*,-node-lifecycle-controller",
        ]


@contextlib.contextmanager
def running(directory: Path, k8s_version: str = DEFAULT_K8S_VERSION, pod_access: bool = False) -> Iterator[ControlPlane]:
    """A control plane on free ports for the duration of the block (tests, benchmarks)."""
    cp = ControlPlane(directory, k8s_version, ports=Ports.free(), pod_access=pod_access)
    cp.up()
    try:
        yield cp
    finally:
        cp.down()
