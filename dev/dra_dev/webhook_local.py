"""`dra webhook up|down`: the webhook for a cluster reachable from this machine (the embedded
control plane, the demo, tests).

`up` writes a CA and a serving certificate for 127.0.0.1 into its directory, starts
`dra webhook run` in the background (its own session; PID and command recorded in
``webhook.json``), waits until it is ready, then registers the Mutating- and
ValidatingWebhookConfiguration (url clientConfig with the CA bundle). `down` deletes those two
objects (only if they carry this webhook's label), stops only the process it recorded (the PID
must still run the recorded command line) and removes the certificates and the state file; the
log is kept. ResourceClaimTemplates the webhook made while it ran stay: pods may reference them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from dra._runtime import registry
from dra._runtime.wait import WaitTimeout, until
from dra.errors import UserError
from dra.webhook import registration, vendors
from dra_dev.cluster.certs import new_ca, new_serving_cert, write_pair

STATE = "webhook.json"


def default_dir() -> Path:
    env = os.environ.get("DRA_WEBHOOK_DIR")
    return Path(env).expanduser() if env else Path.home() / ".local" / "share" / "dra" / "webhook"


@dataclass
class State:
    pid: int
    cmdline: list[str]
    port: int
    health_port: int
    kubeconfig: str
    name: str

    @classmethod
    def load(cls, directory: Path) -> State | None:
        try:
            return cls(**json.loads((directory / STATE).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def save(self, directory: Path) -> None:
        tmp = directory / (STATE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(directory / STATE)

    def running(self) -> bool:
        """True when the recorded PID is alive and still runs the recorded command (not a reused PID)."""
        try:
            cmd = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        return [c.decode() for c in cmd if c] == self.cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pki(directory: Path) -> tuple[Path, Path, Path]:
    pki = directory / "pki"
    ca_path, cert_path, key_path = pki / "ca.crt", pki / "serving.crt", pki / "serving.key"
    if not (ca_path.is_file() and cert_path.is_file() and key_path.is_file()):
        pki.mkdir(parents=True, exist_ok=True)
        ca, ca_key = new_ca("dra-webhook-ca")
        cert, key = new_serving_cert(ca, ca_key, "dra-webhook", ["localhost"], ["127.0.0.1"])
        write_pair(ca_path, pki / "ca.key", ca, ca_key)
        write_pair(cert_path, key_path, cert, key)
    return ca_path, cert_path, key_path


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _api(kubeconfig: Path) -> Any:
    from dra._runtime import client

    return client.AdmissionregistrationV1Api(client.new_client_from_config(config_file=str(kubeconfig)))


def _apply(api: Any, kind: str, body: dict[str, Any]) -> None:
    from dra._runtime.client import ApiException

    create = getattr(api, f"create_{kind}")
    read = getattr(api, f"read_{kind}")
    replace = getattr(api, f"replace_{kind}")
    try:
        create(body)
        return
    except ApiException as e:
        if e.status != 409:
            raise UserError(f"cannot register {body['kind']} {body['metadata']['name']}: HTTP {e.status} {e.reason}") from None
    current = read(body["metadata"]["name"])
    labels = current.metadata.labels or {}
    if any(labels.get(k) != v for k, v in registration.LABEL.items()):
        raise UserError(f"{body['kind']} {body['metadata']['name']} exists and was not made by `dra webhook up`; "
                        f"delete it or pass another --name")
    body = {**body, "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version}}
    replace(body["metadata"]["name"], body)


def up(kubeconfig: Path, directory: Path | None = None, *, port: int = 0, health_port: int = 0,
       config: Path | None = None, failure_policy: str = "Fail", namespace: str = "dra-system",
       opt_out: tuple[str, str] = registration.DEFAULT_OPT_OUT, name: str = registration.NAME,
       timeout: float = 60.0) -> State:
    """Certificates, the background server and the two configurations; idempotent."""
    directory = (directory or default_dir()).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    kubeconfig = kubeconfig.resolve()
    if not kubeconfig.is_file():
        raise UserError(f"kubeconfig {kubeconfig} does not exist; pass the cluster's admin kubeconfig with --kubeconfig")
    mapping = vendors.load(config)  # fail here, with the file's error, not in the background process
    ca_path, cert_path, key_path = _pki(directory)
    state = State.load(directory)
    if state is None or not state.running():
        port = port or _free_port()
        health_port = health_port or _free_port()
        cmd = [sys.executable, "-m", "dra.cli", "webhook", "run", "--cert", str(cert_path), "--key", str(key_path),
               "--host", "127.0.0.1", "--port", str(port), "--health-port", str(health_port),
               "--kubeconfig", str(kubeconfig), "--log-format", "json"]
        if config is not None:
            cmd += ["--config", str(Path(config).resolve())]
        log = directory / "webhook.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=directory)
        state = State(proc.pid, cmd, port, health_port, str(kubeconfig), name)
        state.save(directory)
        def not_ready(message: str) -> UserError:
            tail = log.read_text(errors="replace")[-2000:]
            _stop(state)
            return UserError(f"the webhook did not become ready: {message} (read {log}):\n{tail}")

        def ready() -> bool:
            if proc.poll() is not None:
                raise not_ready(f"it exited with {proc.returncode}")
            return _ready(health_port)

        until(ready, timeout=timeout, interval=0.2, what="its health port", error=not_ready)
    ca_bundle = base64.b64encode(ca_path.read_bytes()).decode()
    mutating, validating = registration.configurations(
        mapping, ca_bundle, url=f"https://127.0.0.1:{state.port}", namespace=namespace,
        failure_policy=failure_policy, opt_out=opt_out, drivers=sorted(registry.driver_classes()), name=name)
    api = _api(kubeconfig)
    _apply(api, "mutating_webhook_configuration", mutating)
    _apply(api, "validating_webhook_configuration", validating)
    return state


def _stop(state: State) -> bool:
    if not state.running():
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(state.pid, signal.SIGTERM)
    with contextlib.suppress(WaitTimeout):  # a grace period, then SIGKILL
        until(lambda: not state.running(), timeout=10, interval=0.1, what=f"pid {state.pid} to exit")
    if state.running():
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGKILL)
        while state.running():
            time.sleep(0.05)
    return True


def stop_server(directory: Path | None = None) -> bool:
    """Stop the background server only (the configurations stay): what an outage looks like."""
    state = State.load((directory or default_dir()).resolve())
    return bool(state and _stop(state))


def down(kubeconfig: Path | None = None, directory: Path | None = None, name: str | None = None) -> list[str]:
    """Undo `up`: the two configurations, the process, the certificates and the state. Returns what was undone."""
    from dra._runtime.client import ApiException

    directory = (directory or default_dir()).resolve()
    state = State.load(directory)
    kubeconfig = kubeconfig or (Path(state.kubeconfig) if state else None)
    name = name or (state.name if state else registration.NAME)
    done: list[str] = []
    if kubeconfig is not None:
        api = _api(Path(kubeconfig))
        for kind in ("mutating_webhook_configuration", "validating_webhook_configuration"):
            try:
                current = getattr(api, f"read_{kind}")(name)
            except ApiException as e:
                if e.status == 404:
                    continue
                raise UserError(f"cannot read {kind.replace('_', ' ')} {name}: HTTP {e.status} {e.reason}") from None
            labels = current.metadata.labels or {}
            if any(labels.get(k) != v for k, v in registration.LABEL.items()):
                continue  # not ours: leave it
            with contextlib.suppress(ApiException):
                getattr(api, f"delete_{kind}")(name)
                done.append(f"{kind.replace('_', ' ')} {name}")
    if state is not None and _stop(state):
        done.append(f"webhook process {state.pid}")
    for p in ("pki/ca.crt", "pki/ca.key", "pki/serving.crt", "pki/serving.key", STATE):
        with contextlib.suppress(FileNotFoundError):
            (directory / p).unlink()
    with contextlib.suppress(OSError):
        (directory / "pki").rmdir()
    return done


# `dra webhook up|down` (registered in dev/pyproject.toml's dra.commands as webhook.up / webhook.down)
def up_command(
    kubeconfig: Annotated[Path, typer.Option(help="the cluster's admin kubeconfig")],
    dir: Annotated[Path | None, typer.Option("--dir", help="state, certificates, log (default ~/.local/share/dra/webhook)")] = None,
    port: Annotated[int, typer.Option(help="HTTPS port (0: a free one)")] = 0,
    config: Annotated[Path | None, typer.Option("--config", help="vendor mapping file (default: the shipped one)")] = None,
    failure_policy: Annotated[str, typer.Option(help="Fail or Ignore")] = "Fail",
    namespace: Annotated[str, typer.Option(help="the webhook's own namespace (never served)")] = "dra-system",
) -> None:
    """Certificates, the server in the background and the webhook configurations."""
    if failure_policy not in ("Fail", "Ignore"):
        raise UserError(f"--failure-policy must be Fail or Ignore, not {failure_policy!r}")
    state = up(kubeconfig, dir, port=port, config=config, failure_policy=failure_policy, namespace=namespace)
    typer.echo(f"webhook serving on https://127.0.0.1:{state.port} (pid {state.pid}, health :{state.health_port}); "
               f"registered {state.name} with failurePolicy {failure_policy}")


def down_command(
    kubeconfig: Annotated[Path | None, typer.Option(help="default: the one `up` used")] = None,
    dir: Annotated[Path | None, typer.Option("--dir")] = None,
) -> None:
    """Undo `up`: the configurations, the process, the certificates."""
    done = down(kubeconfig, dir)
    typer.echo("removed: " + (", ".join(done) if done else "nothing (not up)"))
