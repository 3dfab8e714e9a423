"""Real Helm and kubectl for the chart tests: run them, render charts, read their output."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
HELM_DIR = ROOT / "helm"
DRIVER_CHARTS = ("hami-core-gpu", "ascend", "hygon-dcu", "cambricon-mlu")
KUBE_VERSION = "1.34.4"


@dataclass(frozen=True)
class Tool:
    """A command-line tool (helm, kubectl) bound to a kubeconfig (None: offline commands only)."""

    binary: Path
    kubeconfig: Path | None = None

    def run(self, *args: str, check: bool = True, stdin: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HELM_CACHE_HOME": os.environ.get("HELM_CACHE_HOME", "/tmp/dra-helm-cache"),
               "HELM_CONFIG_HOME": "/tmp/dra-helm-config", "HELM_DATA_HOME": "/tmp/dra-helm-data"}
        env.pop("KUBECONFIG", None)
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        proc = subprocess.run([str(self.binary), *args], capture_output=True, text=True, env=env, input=stdin,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{self.binary.name} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}")
        return proc

    def with_kubeconfig(self, kubeconfig: Path) -> Tool:
        return Tool(self.binary, kubeconfig)


def set_args(values: Mapping[str, Any] | None) -> list[str]:
    """`--set-json key=<json>` per dotted key: types survive (a string "on" stays a string)."""
    import json

    out: list[str] = []
    for key, value in (values or {}).items():
        out += ["--set-json", f"{key}={json.dumps(value)}"]
    return out


def render(helm: Tool, chart: str, release: str = "r", namespace: str = "dra-test",
           values: Mapping[str, Any] | None = None, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """`helm template` of a chart in helm/, as parsed objects."""
    proc = helm.run("template", release, str(HELM_DIR / chart), "--namespace", namespace,
                    "--kube-version", KUBE_VERSION, *set_args(values), *extra)
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def render_error(helm: Tool, chart: str, values: Mapping[str, Any] | None = None, extra: Sequence[str] = ()) -> str:
    """The one-paragraph error of a `helm template` that must fail."""
    proc = helm.run("template", "r", str(HELM_DIR / chart), "--kube-version", KUBE_VERSION,
                    *set_args(values), *extra, check=False)
    assert proc.returncode != 0, f"helm template {chart} {values} should have failed:\n{proc.stdout[:2000]}"
    return " ".join(line for line in proc.stderr.splitlines() if "symbolic link" not in line)


def one(objects: Iterable[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def kinds(objects: Iterable[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def container(pod_spec: dict[str, Any], name: str, init: bool = False) -> dict[str, Any]:
    for c in pod_spec.get("initContainers" if init else "containers") or []:
        if c["name"] == name:
            return c
    raise AssertionError(f"no {'init ' if init else ''}container {name!r} in {pod_spec}")


def to_yaml(objects: Iterable[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(list(objects), sort_keys=False)
