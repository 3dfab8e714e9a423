"""MPS on the fake node (the FAKE nvidia-cuda-mps-control of drivers/hami_core_gpu/fake_mps, which
records its commands): one control daemon per GPU, the claim's CDI edits, restart when it dies."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from driver_helpers import isolated_env

from dra import AllocatedDevice, ClaimRef, DriverContext, HealthEvent, PrepareError, decode_config
from drivers.hami_core_gpu.config import API_VERSION, GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

# The stub variables a test may set (conftest.py's list and the MIG record), unset inside, restored after.
STUB_ENV = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NVML_DRIVER", "HOOKCORE_STUB_NVML_CUDA", "HOOKCORE_STUB_NVML_FAIL",
            "HOOKCORE_STUB_NVML_EVENTS", "HOOKCORE_STUB_NVML_MIG")
GiB = 1 << 30
MPS = GpuConfig(sharing="mps")


def claim(n: int) -> ClaimRef:
    return ClaimRef(f"0c6a3f6e-0000-4000-8000-0000000{n:05d}", "default", f"mps-{n}")


@pytest.fixture
def root(tmp_path: Path, stub_nvml: Path) -> Iterator[Path]:
    """A short root: the control socket's path must fit a unix socket (pytest's tmp_path is long)."""
    short = Path(tempfile.mkdtemp(prefix="mps", dir="/tmp"))
    with isolated_env(STUB_ENV):
        os.environ["HOOKCORE_STUB_NVML_MIG"] = str(tmp_path / "mig.state")
        yield short
    shutil.rmtree(short, ignore_errors=True)


class Node:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.health: list[list[HealthEvent]] = []
        self.drivers: list[HamiCoreGpuDriver] = []

    def driver(self) -> HamiCoreGpuDriver:
        d = HamiCoreGpuDriver()
        d.setup(DriverContext("node-a", "node-a", {"health": "off", "mpsRoot": str(self.root)}, fake="h200x8",
                              on_health=lambda ev: self.health.append(list(ev))))
        self.drivers.append(d)
        return d

    def log(self, uuid: str) -> list[str]:
        """The control log, the previous daemon's (kept at a restart) first."""
        paths = (self.root / uuid / "control.log.prev", self.root / uuid / "log" / "control.log")
        return [ln for path in paths if path.exists() for ln in path.read_text().splitlines()]


@pytest.fixture
def node(root: Path) -> Iterator[Node]:
    n = Node(root)
    yield n
    for d in n.drivers:
        if d.mps is not None:
            d.mps.stop_all()
        d.close()
    for d in n.drivers:  # nothing of the test keeps running
        assert d.mps is None or not any(d.mps.ask(g.name, "get_server_list") is not None
                                        for g in (n.root.iterdir() if n.root.exists() else ())), "a daemon left"


def share(device: str, cores: int, memory: int, config: GpuConfig | None = MPS, sid: str = "s1") -> AllocatedDevice:
    return AllocatedDevice("gpu", "node-a", device, sid, {"cores": cores, "memory": memory}, config=config)


def test_an_mps_claim_gets_the_pipe_dir_read_only_and_both_limits(node: Node) -> None:
    d = node.driver()
    uuid = {x.name: str(x.attributes["uuid"]) for x in d.devices()}["hami-gpu-3"]
    prepared = d.prepare(claim(1), [share("hami-gpu-3", 30, 10 * GiB)])
    edits = d.claim_edits(claim(1), prepared)
    assert edits.env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia-mps"
    assert "CUDA_MPS_LOG_DIRECTORY" not in edits.env  # no log dir in the container
    assert edits.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert edits.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"
    mounts = {m.container_path: m for m in edits.mounts}
    assert mounts["/run/nvidia-mps"].host_path == str(node.root / uuid / "pipe")
    assert "ro" in mounts["/run/nvidia-mps"].options and "rw" not in mounts["/run/nvidia-mps"].options
    assert not any(m.host_path.startswith(str(node.root)) for p, m in mounts.items() if p != "/run/nvidia-mps")
    (quota,) = d.enforcement(claim(1), prepared).quotas  # the hook keeps memory and, as a ceiling, the cores
    assert (quota.uuid, quota.memory, quota.cores) == (uuid, 10 * GiB, 30)
    starts = [ln for ln in node.log(uuid) if " start " in ln]
    assert len(starts) == 1 and f"CUDA_VISIBLE_DEVICES={uuid}" in starts[0]


def test_one_daemon_per_gpu_stopped_after_its_last_claim(node: Node) -> None:
    d = node.driver()
    uuid = {x.name: str(x.attributes["uuid"]) for x in d.devices()}["hami-gpu-0"]
    a = d.prepare(claim(1), [share("hami-gpu-0", 30, GiB)])
    b = d.prepare(claim(2), [share("hami-gpu-0", 70, GiB, sid="s2")])
    assert sum(" start " in ln for ln in node.log(uuid)) == 1
    d.unprepare(claim(1), a)
    assert d.mps is not None and d.mps.ask(uuid, "get_server_list") is not None, "stopped with a claim left"
    log_before = node.log(uuid)
    d.unprepare(claim(2), b)
    assert log_before and d.mps.ask(uuid, "get_server_list") is None
    assert not (node.root / uuid).exists()


def test_a_dead_daemon_is_restarted_and_the_gpu_unhealthy_meanwhile(node: Node) -> None:
    d = node.driver()
    uuid = {x.name: str(x.attributes["uuid"]) for x in d.devices()}["hami-gpu-1"]
    d.prepare(claim(1), [share("hami-gpu-1", 50, GiB)])
    assert d.mps is not None
    first = d.mps.status()[uuid].process
    assert first is not None
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    d.mps.check()
    states = [next(e.healthy for e in snap if e.device == "hami-gpu-1") for snap in node.health]
    assert states == [False, None]  # then back to what NVML says: not monitored here (health=off)
    assert "MPS" in next(e.message for e in node.health[0] if e.device == "hami-gpu-1")
    assert d.mps.status()[uuid].restarts == 1
    assert sum(" start " in ln for ln in node.log(uuid)) == 2
    assert d.mps.ask(uuid, "get_server_list") is not None


@pytest.mark.parametrize("attack", ["quit", "socket-replaced-by-a-directory"])
def test_a_tenant_that_stops_the_shared_daemon_gets_it_restarted(node: Node, attack: str) -> None:
    """Root in a container can still send quit (the pipe is read-only, connect() needs no write); the
    directory where the socket goes stands for anything left there (an earlier version's rw mount)."""
    d = node.driver()
    uuid = {x.name: str(x.attributes["uuid"]) for x in d.devices()}["hami-gpu-4"]
    d.prepare(claim(1), [share("hami-gpu-4", 50, GiB)])
    assert d.mps is not None
    first = d.mps.status()[uuid].process
    assert first is not None
    if attack == "quit":
        assert d.mps.ask(uuid, "quit") is not None  # what any client of the pipe may send
        first.wait(10)
    else:
        first.kill()
        first.wait()
        sock = node.root / uuid / "pipe" / "control"
        sock.unlink(missing_ok=True)
        sock.mkdir()
    d.mps.check()
    assert [next(e.healthy for e in snap if e.device == "hami-gpu-4") for snap in node.health] == [False, None]
    assert d.mps.ask(uuid, "get_server_list") is not None
    assert (node.root / uuid / "claims" / claim(1).uid).read_text() == "default\n", "the claim's record was lost"


def test_a_restarted_driver_adopts_the_running_daemon(node: Node) -> None:
    d = node.driver()
    uuid = {x.name: str(x.attributes["uuid"]) for x in d.devices()}["hami-gpu-2"]
    d.prepare(claim(1), [share("hami-gpu-2", 50, GiB)])
    d.close()  # as after kill -9: the control daemon keeps serving
    again = node.driver()
    assert sum(" start " in ln for ln in node.log(uuid)) == 1
    assert again.mps is not None and uuid in again.mps.status()


def test_mps_on_two_gpus_is_refused(node: Node) -> None:
    d = node.driver()
    with pytest.raises(PrepareError, match="one GPU"):
        d.prepare(claim(1), [share("hami-gpu-0", 50, GiB), share("hami-gpu-1", 50, GiB, sid="s2")])


def test_a_missing_control_program_is_a_clear_refusal(root: Path, node: Node) -> None:
    d = HamiCoreGpuDriver()
    d.setup(DriverContext("node-a", "node-a", {"health": "off", "mpsRoot": str(root),
                                                "mpsControl": str(root / "nope")}, fake="h200x8"))
    node.drivers.append(d)
    with pytest.raises(PrepareError, match="mpsControl"):
        d.prepare(claim(1), [share("hami-gpu-0", 50, GiB)])


def test_an_mps_root_too_long_for_a_socket_is_refused_naming_the_setting(tmp_path: Path, node: Node) -> None:
    d = HamiCoreGpuDriver()
    d.setup(DriverContext("node-a", "node-a", {"health": "off", "mpsRoot": str(tmp_path / ("x" * 80))},
                          fake="h200x8"))
    node.drivers.append(d)
    with pytest.raises(PrepareError, match="shorter --set mpsRoot"):
        d.prepare(claim(1), [share("hami-gpu-0", 50, GiB)])


@pytest.mark.parametrize(("params", "error"), [
    ({"sharing": "mig"}, "field .sharing."),
    ({"sharing": "mps", "computeMode": "strict"}, "drop one"),
    ({"sharing": 1}, "sharing"),
])
def test_bad_sharing_configs_are_refused_naming_the_field(params: dict[str, object], error: str) -> None:
    with pytest.raises(Exception, match=error):
        decode_config(HamiCoreGpuDriver, {"apiVersion": API_VERSION, "kind": "GpuConfig", **params})


def test_sharing_mps_decodes() -> None:
    got = decode_config(HamiCoreGpuDriver, {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": "mps"})
    assert got == MPS


def test_server_pids_name_the_control_daemon_and_its_servers_for_the_watchdog(node: Node) -> None:
    """Review 2026-12-04 #11: an MPS server is a GPU process of no claim; the watchdog learns it here
    (the servers are the control daemon's children, as on the H200, so a new one is known at once)."""
    d = node.driver()
    uuid = {x.name: str(x.attributes["uuid"]) for x in d.devices()}["hami-gpu-5"]
    prepared = d.prepare(claim(1), [share("hami-gpu-5", 50, GiB)])
    assert d.mps is not None
    control = d.mps.status()[uuid].process
    assert control is not None and d.mps.server_pids() == {control.pid}
    assert d.mps.ask(uuid, "start_server -uid 0") is not None  # what a client's arrival does
    (server,) = [int(w) for w in (d.mps.ask(uuid, "get_server_list") or "").split()]
    assert d.mps.server_pids() == {control.pid, server}  # before any watcher round
    d.mps.check()
    assert d.mps.status()[uuid].servers == {server}
    d.close()  # as after kill -9: the next daemon adopts the control daemon, its PID from its pid file
    again = node.driver()
    assert again.mps is not None and again.mps.server_pids() == {control.pid, server}
    again.unprepare(claim(1), prepared)
    assert again.mps.server_pids() == frozenset()


def test_an_adopted_pid_file_naming_another_program_is_not_believed(node: Node) -> None:
    d = node.driver()
    uuid = {x.name: str(x.attributes["uuid"]) for x in d.devices()}["hami-gpu-6"]
    d.prepare(claim(1), [share("hami-gpu-6", 50, GiB)])
    assert d.mps is not None
    d.close()
    (node.root / uuid / "pipe" / "nvidia-cuda-mps-control.pid").write_text(f"{os.getpid()}\n")  # pytest's PID
    again = node.driver()
    assert again.mps is not None and os.getpid() not in again.mps.server_pids()


@pytest.mark.parametrize(("value", "ok"), [("namespace", True), ("any", True), ("all", False), ("", False)])
def test_mps_sharing_setting(value: str, ok: bool) -> None:
    from drivers.hami_core_gpu.settings import Settings, SettingsError

    if ok:
        assert Settings.parse({"mpsSharing": value}).mps_sharing == value
    else:
        with pytest.raises(SettingsError, match="mpsSharing"):
            Settings.parse({"mpsSharing": value})
    assert Settings.parse({}).mps_sharing == "namespace"


def test_the_drivers_process_list_marks_its_own_mps_processes_and_nothing_else(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review 2026-12-04 #11, wired: what NVML lists is marked ``mps`` only for the PIDs the MPS
    daemons know (the control daemon, its servers); a tenant's process on the same GPU is not."""
    d = node.driver()
    names = {x.name: x for x in d.devices()}
    uuid = str(names["hami-gpu-5"].attributes["uuid"])
    d.prepare(claim(1), [share("hami-gpu-5", 50, GiB)])
    assert d.mps is not None and d.mps.ask(uuid, "start_server -uid 0") is not None
    (server,) = [int(w) for w in (d.mps.ask(uuid, "get_server_list") or "").split()]
    control = d.mps.status()[uuid].process
    assert control is not None
    tenant = os.getpid()  # any process that is not the daemon's
    listed = tmp_path / "nvml-processes"
    index = d.by_name["hami-gpu-5"].index
    listed.write_text(f"{index} {server} {1 << 30}\n{index} {control.pid} {1 << 20}\n{index} {tenant} {1 << 30}\n")
    monkeypatch.setenv("STUB_NVML_PROCESSES", str(listed))
    got = {p.pid: p.system for p in d.processes()}
    assert got == {server: "mps", control.pid: "mps", tenant: None}
    d.mps.stop_all()
