"""Run `dra run DRIVER` as a child process, as a DaemonSet pod would, for tests and benchmarks.

The daemon gets its own directories (registrar, plugins, CDI, state) under a short work dir, so
unix socket paths stay well within 107 bytes, and a free port for /healthz, /readyz, /metrics.

The driver is found through the ``dra.drivers`` entry-point group, exactly as a node finds it:
the distribution that ships it must be installed in this interpreter's environment.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from dra._runtime.wait import until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DaemonProcess:
    """One `dra run` child process with its own directories."""

    def __init__(
        self,
        driver: str,
        node: str,
        kubeconfig: Path,
        workdir: Path,
        *,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        log_format: str = "text",
        module: str = "dra.cli",
        kubelet_dirs: Mapping[str, Path] | None = None,
    ) -> None:
        """`module` "dra.cli" runs ``dra run``, what the charts run; another module is run with the
        same arguments (``python -m MODULE DRIVER ...``, e.g. an older checkout's daemon module).
        `kubelet_dirs` ("registrar", "plugins", "cdi") points the daemon at a real node's
        directories instead of its own (a real kubelet then calls it)."""
        self.driver = driver
        self.node = node
        self.workdir = workdir
        dirs = kubelet_dirs or {}
        self.registrar_dir = dirs.get("registrar", workdir / "registry")
        self.plugin_dir = dirs.get("plugins", workdir / "plugins")
        self.cdi_dir = dirs.get("cdi", workdir / "cdi")
        self.state_dir = workdir / "state"
        self.hook_dir = workdir / "hook-dir"
        self.log_path = workdir / "daemon.log"
        self.metrics_port = free_port()
        for d in (self.registrar_dir, self.plugin_dir, self.cdi_dir, self.state_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **(env or {})}
        self.argv = [
            sys.executable, "-m", module, *(["run"] if module == "dra.cli" else []), driver,
            "--node-name", node,
            "--kubeconfig", str(kubeconfig),
            "--registrar-dir", str(self.registrar_dir),
            "--plugin-dir", str(self.plugin_dir),
            "--cdi-dir", str(self.cdi_dir),
            "--state-dir", str(self.state_dir),
            "--hook-dir", str(self.hook_dir),
            "--metrics-port", str(self.metrics_port),
            "--metrics-address", "127.0.0.1",
            "--log-format", log_format,
            *args,
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DaemonProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """GET http://127.0.0.1:<metrics port><path>: (status, body); (0, reason) when unreachable."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=timeout) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode()
        except OSError as e:
            return 0, str(e)

    def wait_http(self, path: str, status: int = 200, timeout: float = 30.0) -> str:
        def answered() -> tuple[str] | None:
            if not self.alive():
                raise AssertionError(f"the daemon exited with {self.proc and self.proc.returncode}:\n{self.log()[-4000:]}")
            got = self.get(path)
            return (got[1],) if got[0] == status else None  # a tuple: an empty body is an answer too

        def wrong(message: str) -> AssertionError:
            return AssertionError(f"GET {path}: {message}; last answer {self.get(path)}:\n{self.log()[-4000:]}")

        return until(answered, timeout=timeout, what=f"status {status}", error=wrong)[0]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Signal the daemon and wait for it; kill it after `timeout`. Returns the exit status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)

    def sockets(self) -> list[Path]:
        """Unix sockets under the registrar and plugin dirs."""
        found = []
        for root in (self.registrar_dir, self.plugin_dir):
            for p in root.rglob("*"):
                if p.is_socket():
                    found.append(p)
        return sorted(found)
