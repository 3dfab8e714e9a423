"""The alert rules and dashboard queries exactly as a chart ships them: `helm template` with the
Prometheus Operator's API present (``--api-versions monitoring.coreos.com/v1``), then read out of
the rendered PrometheusRule and dashboard ConfigMap."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra.errors import UserError
from dra_dev.checkout import path as checkout_path

MONITORING_API = "monitoring.coreos.com/v1"


def render_chart(helm: Path, chart: str, release: str = "mon", namespace: str = "dra-monitoring",
                 values: Mapping[str, Any] | None = None, crds: bool = True,
                 kube_version: str = "1.34.4") -> list[dict[str, Any]]:
    """`helm template` of helm/`chart` as parsed objects; `values` by dotted key (``--set-json``);
    `crds`: the cluster serves monitoring.coreos.com/v1."""
    args = [str(helm), "template", release, str(checkout_path("helm", chart)), "--namespace", namespace,
            "--kube-version", kube_version]
    if crds:
        args += ["--api-versions", MONITORING_API]
    for key, value in (values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/dra-helm-cache", "HELM_CONFIG_HOME": "/tmp/dra-helm-config",
           "HELM_DATA_HOME": "/tmp/dra-helm-data"}
    env.pop("KUBECONFIG", None)
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        raise UserError(f"helm template {chart} failed: {proc.stderr.strip()[-2000:]}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def of_kind(objects: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def rule_groups(objects: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rule groups of the rendered PrometheusRule(s), as a Prometheus rule file holds them."""
    return [g for rule in of_kind(objects, "PrometheusRule") for g in rule["spec"]["groups"]]


def write_rule_file(objects: Sequence[dict[str, Any]], path: Path) -> Path:
    path.write_text(yaml.safe_dump({"groups": rule_groups(objects)}, sort_keys=False))
    return path


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    ref: str
    expr: str
    legend: str


def dashboard(objects: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The Grafana dashboard of the rendered ConfigMap."""
    (cm,) = [o for o in of_kind(objects, "ConfigMap") if (o["metadata"].get("labels") or {}).get("grafana_dashboard")]
    (text,) = cm["data"].values()
    result: dict[str, Any] = json.loads(text)
    return result


def panel_queries(board: Mapping[str, Any]) -> list[PanelQuery]:
    """Every query of every panel, in the dashboard's order."""
    return [PanelQuery(p["title"], t["refId"], t["expr"], t.get("legendFormat", ""))
            for p in board["panels"] for t in p.get("targets", [])]


def as_promql(expr: str, variables: Mapping[str, str], rate_interval: str = "30s") -> str:
    """A Grafana query with its variables given (``$name`` / ``${name}``) and ``$__rate_interval``
    replaced, as Grafana sends it to Prometheus."""
    expr = expr.replace("$__rate_interval", rate_interval)

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise KeyError(f"no value for dashboard variable ${name} in {expr!r}")
        return variables[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def fast_rule_values(chart: str, for_: str = "1s", window: str = "5s") -> dict[str, Any]:
    """Values that give every alert of `chart` the `for:` `for_` and its counter window `window`
    (tests: alerts that fire and resolve within seconds)."""
    keys = yaml.safe_load(checkout_path("helm", chart, "values.yaml").read_text())["monitoring"]["prometheusRule"]["for"]
    return {**{f"monitoring.prometheusRule.for.{k}": for_ for k in keys}, "monitoring.prometheusRule.window": window}
