"""Write the charts' generated files (run: python helm/generate.py; tests/charts checks them).

- ``<chart>/values.schema.json``: the charts share most of their values (dra-common's templates
  read them), so their schemas are built here from shared parts instead of copied by hand.
  Every object refuses unknown keys, so a typo in a value fails `helm install` with the key's
  path instead of being ignored.
  The daemon's values that are a flag with choices (preload, logFormat, ...) take them from the
  flag (`dra._runtime.daemon.DaemonSettings`).
- ``dra-webhook/files/webhook-configurations.json``: the Mutating- and
  ValidatingWebhookConfiguration as `dra.webhook.registration` builds them (rules, CEL match
  conditions from the shipped vendor mapping, selectors), with placeholders the chart fills in
  (``__NAME__``, ``__NAMESPACE__``, ``__SERVICE__``, ``__CA_BUNDLE__``). One builder, so the
  chart and `dra webhook up` register the same webhooks.
- ``<driver chart>/files/dashboard.json``: the Grafana dashboard the chart ships in a ConfigMap
  (`dashboard`; the queries are the ones tests/monitoring runs against a real Prometheus).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HELM_DIR = Path(__file__).resolve().parent

ABS_PATH = {"type": "string", "pattern": "^/", "description": "an absolute path"}
DNS_SUBDOMAIN = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253}
LABEL_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
ANY_OBJECT = {"type": "object"}
PEERS = {"type": "array", "items": ANY_OBJECT, "description": "NetworkPolicyPeers (podSelector, namespaceSelector, ipBlock)"}
QUALIFIED_NAME_OR_EMPTY = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
INT_OR_PERCENT = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^[0-9]+%$"}]}
# Feature gates the charts know how to check (dra-common's gateDefaults).
GATES = ["DRAConsumableCapacity", "DRAExtendedResource", "DRADeviceTaints", "DRAPartitionableDevices"]


def obj(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        out["required"] = required
    out.update(extra)
    return out


FEATURE_GATES = obj({"check": {"type": "boolean"},
                     "required": {"type": "array", "items": {"enum": GATES}, "uniqueItems": True}})


def image() -> dict[str, Any]:
    return obj({
        "repository": {"type": "string", "minLength": 1},
        "tag": {"type": "string", "pattern": r"^[\w][\w.-]{0,127}$|^$"},
        "digest": {"type": "string", "pattern": "^(sha256:[a-f0-9]{64})?$"},
        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    }, ["repository"])


def common() -> dict[str, Any]:
    return {
        "image": image(),
        "imagePullSecrets": {"type": "array", "items": obj({"name": {"type": "string", "minLength": 1}}, ["name"])},
        "nameOverride": {"type": "string", "maxLength": 40},
        "fullnameOverride": {"type": "string", "maxLength": 52},
        "serviceAccount": obj({
            "create": {"type": "boolean"},
            "name": {"anyOf": [DNS_SUBDOMAIN, {"const": ""}]},
            "annotations": LABEL_MAP,
        }),
    }


def daemon_flag(field: str) -> Any:
    """The `dra run` flag of a DaemonSettings field (dra/_runtime/daemon.py declares each flag once)."""
    from dra._runtime import flags
    from dra._runtime.daemon import DaemonSettings

    return flags.of(DaemonSettings, field)


def flag_enum(field: str) -> dict[str, Any]:
    """The values a chart may give a flag with choices: the flag's own."""
    return {"enum": list(daemon_flag(field).choices)}


def driver_schema(entry_point: str, driver_name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The schema of a node-daemon chart (hami-core-gpu, ascend, hygon-dcu, cambricon-mlu)."""
    kubelet_plugin = obj({
        "nodeSelector": LABEL_MAP,
        "tolerations": {"type": "array", "items": ANY_OBJECT},
        "affinity": ANY_OBJECT,
        "priorityClassName": {"type": "string"},
        "runtimeClassName": {"type": "string"},
        "privileged": {"type": "boolean"},
        "updateStrategy": obj({
            "type": {"enum": ["RollingUpdate", "OnDelete"]},
            "rollingUpdate": obj({"maxSurge": INT_OR_PERCENT, "maxUnavailable": INT_OR_PERCENT}),
        }, ["type"]),
        "terminationGracePeriodSeconds": {"type": "integer", "minimum": 1},
        "resources": ANY_OBJECT,
        "probes": obj({
            "periodSeconds": {"type": "integer", "minimum": 1},
            "timeoutSeconds": {"type": "integer", "minimum": 1},
            "livenessFailureThreshold": {"type": "integer", "minimum": 1},
            "startupFailureThreshold": {"type": "integer", "minimum": 1},
        }, ["periodSeconds", "timeoutSeconds", "livenessFailureThreshold", "startupFailureThreshold"]),
        "env": {"type": "array", "items": {"type": "object", "required": ["name"],
                                           "properties": {"name": {"type": "string", "minLength": 1}}}},
        "podLabels": LABEL_MAP,
        "podAnnotations": LABEL_MAP,
        "extraVolumes": {"type": "array", "items": ANY_OBJECT},
        "extraVolumeMounts": {"type": "array", "items": ANY_OBJECT},
    }, ["updateStrategy", "probes", "terminationGracePeriodSeconds"])
    daemon = obj({
        "settings": settings,
        "fake": {"type": "string", "description": "the driver's fake backend: a profile name or a file; empty: real devices"},
        "preload": flag_enum("preload"),
        "metricsPort": {"type": "integer", "minimum": 1, "maximum": 65535},
        "metricsBind": {"enum": ["podIP", "all"], "description": "podIP: the pod's own address; all: 0.0.0.0"},
        "allowClaimLoosening": {"type": "boolean",
                                "description": "honour a claim's own config where it loosens enforcement"},
        "grpcWorkers": {"type": "integer", "minimum": daemon_flag("grpc_workers").minimum},
        "logFormat": flag_enum("log_format"),
        "logLevel": flag_enum("log_level"),
        "extraArgs": {"type": "array", "items": {"type": "string", "pattern": "^--[a-z]"}},
        "watchdog": obj({"action": {**flag_enum("watchdog"),
                                    "description": "the process watchdog (dra/_runtime/watchdog/); on: hostPID, CAP_KILL "
                                                   "and CAP_SYS_PTRACE (maps: proof of a held process)"}}),
    }, ["preload", "metricsPort", "metricsBind", "grpcWorkers", "logFormat", "logLevel"])
    device_class = obj({
        "name": DNS_SUBDOMAIN,
        "selector": {"type": "string", "minLength": 1, "description": "a CEL expression over `device`"},
        "extendedResourceName": {"type": "string", "pattern": QUALIFIED_NAME_OR_EMPTY,
                                 "description": "a qualified name such as nvidia.com/gpu, or empty"},
        "parameters": {"type": "object", "required": ["apiVersion", "kind"],
                       "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}},
                       "description": "the driver's opaque config for every claim of this class (GpuConfig, "
                                      "NpuConfig); a claim's own config for a request replaces it, and may set a "
                                      "field weaker only with daemon.allowClaimLoosening"},
    }, ["name", "selector"])
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": f"values of the {entry_point} chart",
        **obj({
            "global": ANY_OBJECT,
            "dra-common": ANY_OBJECT,  # Helm adds a key per dependency, the library chart too
            "driver": obj({"entryPoint": {"const": entry_point}, "name": {"const": driver_name}},
                          ["entryPoint", "name"]),
            **common(),
            "daemon": daemon,
            "paths": obj({**{k: ABS_PATH for k in ("kubeletPluginsDir", "kubeletRegistrarDir", "cdiDir", "hookDir")},
                          **shared_host_dirs()},
                         ["kubeletPluginsDir", "kubeletRegistrarDir", "cdiDir", "hookDir"]),
            "hook": obj({"install": {"type": "boolean"},
                         "libraries": {"type": "array", "uniqueItems": True,
                                       "items": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_]*$",
                                                 "description": "the stem of lib<stem>.so, e.g. vgpu"}}}),
            "kubeletPlugin": kubelet_plugin,
            "deviceClasses": {"type": "array", "items": device_class},
            "modeClasses": mode_classes(device_class),
            "sliceNodePolicy": obj({"enabled": {"type": "boolean"}}),
            "schedulerFence": obj({"enabled": {"type": "boolean"},
                                   "distinctAttribute": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,31}$"}}),
            "networkPolicy": obj({"enabled": {"type": "boolean"}, "metricsFrom": PEERS}, ["enabled"]),
            "featureGates": FEATURE_GATES,
            "monitoring": monitoring_schema(DRIVER_ALERTS, dashboard=True),
        }, ["driver", "image", "daemon", "paths", "kubeletPlugin", "serviceAccount"]),
    }


def mode_classes(device_class: dict[str, Any]) -> dict[str, Any]:
    """`modeClasses`: the classes of the modes a driver's daemon serves (MIG, MPS, strict,
    memory-only), by key, each a DeviceClass entry that `enabled` turns on or off and `fenced`
    keeps out of the admission fence (dra-common's "dra-common.classes")."""
    entry = {**device_class,
             "properties": {**device_class["properties"],
                            "enabled": {"type": "boolean"},
                            "fenced": {"type": "boolean", "description": "covered by the kubernetes#133705 fence "
                                                                         "(false: devices allocated whole, e.g. MIG)"},
                            "offWhen": {"type": "object", "additionalProperties": {"type": "string"},
                                        "description": "daemon.settings values with which the daemon serves none of "
                                                       "the class's devices (the chart refuses them together)"},
                            "hostDir": obj({"setting": {"type": "string", "minLength": 1}, "default": ABS_PATH},
                                           ["setting", "default"],
                                           description="the setting naming a host dir the class's claims mount: it "
                                                       "must be in paths.sharedHostDirs")},
             "required": ["enabled", "name", "selector"]}
    return {"type": "object", "additionalProperties": entry,
            "propertyNames": {"pattern": r"^[A-Za-z][A-Za-z0-9]{0,31}$"},
            "description": "the classes of the modes the daemon serves, by key; enabled: false leaves one out"}


def shared_host_dirs() -> dict[str, Any]:
    """`paths.sharedHostDirs`: host dirs the daemon makes and claims' containers mount (the MPS root)."""
    return {"sharedHostDirs": {"type": "array", "uniqueItems": True, "items": {**ABS_PATH, "pattern": "^/[^\\s]*$"},
                               "description": "host dirs mounted at the same path in the daemon (CDI names host paths)"}}


def webhook_schema() -> dict[str, Any]:
    """The schema of the dra-webhook chart."""
    port = {"type": "integer", "minimum": 1, "maximum": 65535}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "values of the dra-webhook chart",
        **obj({
            "global": ANY_OBJECT,
            "dra-common": ANY_OBJECT,
            **common(),
            "replicas": {"type": "integer", "minimum": 1},
            "webhook": obj({
                "port": port,
                "healthPort": port,
                "failurePolicy": {"enum": ["Fail", "Ignore"]},
                "excludeNamespaces": {"type": "array", "uniqueItems": True,
                                      "items": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}},
                "logFormat": {"enum": ["json", "text"]},
                "logLevel": {"enum": ["debug", "info", "warning", "error"]},
                "allowClaimLoosening": {"type": "boolean",
                                        "description": "admit claims whose own config loosens enforcement"},
                "clientCA": obj({"configMap": {"anyOf": [DNS_SUBDOMAIN, {"const": ""}]},
                                 "key": {"type": "string", "minLength": 1}}),
                "acceptUnauthenticatedCallers": {
                    "type": "boolean",
                    "description": "install with neither clientCA nor networkPolicy.apiServerFrom: any caller is answered"},
                "maxShapesPerPod": {"type": "integer", "minimum": 1, "maximum": 1000,
                                    "description": "distinct request shapes (templates) per pod; past it /mutate refuses"},
                "extraArgs": {"type": "array", "items": {"type": "string", "pattern": "^--[a-z]"}},
            }, ["port", "healthPort", "failurePolicy"]),
            "networkPolicy": obj({"enabled": {"type": "boolean"}, "apiServerFrom": PEERS, "metricsFrom": PEERS},
                                 ["enabled"]),
            "service": obj({"port": port}, ["port"]),
            "memoryOnlyClasses": {"type": "array", "description": "DeviceClasses of HAMi's memory-only shares", "items": obj({
                "name": DNS_SUBDOMAIN, "driver": {"type": "string", "minLength": 1},
                "selector": {"type": "string", "minLength": 1},
                "parameters": {"type": "object", "required": ["apiVersion", "kind"]},
            }, ["name", "driver", "selector", "parameters"])},
            "certificates": obj({
                "mode": {"enum": ["helm", "cert-manager", "secret"]},
                "validityDays": {"type": "integer", "minimum": 31, "maximum": 36500},
                "certManager": obj({
                    "issuerRef": obj({"kind": {"enum": ["Issuer", "ClusterIssuer"]}, "name": {"type": "string", "minLength": 1},
                                      "group": {"type": "string"}}),
                    "duration": {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(h|m|s))+$"},
                }),
                "secret": obj({"name": {"anyOf": [DNS_SUBDOMAIN, {"const": ""}]},
                               "caBundle": {"type": "string", "pattern": "^[A-Za-z0-9+/=]*$"}}),
            }, ["mode"]),
            "priorityClassName": {"type": "string"},
            "nodeSelector": LABEL_MAP,
            "tolerations": {"type": "array", "items": ANY_OBJECT},
            "affinity": ANY_OBJECT,
            "resources": ANY_OBJECT,
            "podLabels": LABEL_MAP,
            "podAnnotations": LABEL_MAP,
            "podDisruptionBudget": obj({"enabled": {"type": "boolean"}, "minAvailable": INT_OR_PERCENT}),
            "featureGates": FEATURE_GATES,
            "monitoring": monitoring_schema(WEBHOOK_ALERTS, dashboard=False),
        }, ["image", "webhook", "service", "certificates", "serviceAccount"]),
    }


def string_setting(**extra: Any) -> dict[str, Any]:
    return {"type": "string", **extra}


def gpu_settings() -> dict[str, Any]:
    """`dra run hami-core-gpu --set` keys (drivers/hami_core_gpu/settings.py). YAML reads on/off
    unquoted as booleans: the schema asks for the quoted strings."""
    return obj({
        "cdiMode": {"enum": ["toolkit", "self-contained"]},
        "toolkitCdiKind": string_setting(pattern=r"^[a-z0-9.-]+/[a-z0-9_.-]+$"),
        "driverRoot": ABS_PATH,
        "devRoot": ABS_PATH,
        "deviceMemory": string_setting(pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"),
        "health": {"enum": ["on", "off"], "description": "quote it: unquoted on/off are YAML booleans"},
        "healthProbeInterval": string_setting(pattern=r"^[0-9]+(\.[0-9]+)?$"),
        "sysfs": ABS_PATH,
        "fullLoadClockMhz": string_setting(pattern=r"^[1-9][0-9]{0,4}$",
                                           description="strict-cap claims' full-load SM clock in MHz, quoted"),
        "clockElasticity": {"anyOf": [string_setting(pattern=r"^(0(\.[0-9]{1,3})?|1(\.0{1,3})?)$"),
                                      {"type": "number", "minimum": 0, "maximum": 1}],
                            "description": "strict-cap claims' clock elasticity of the GPU model, 0..1 with at most"
                                           " 3 decimals (unset: the model's measured value, H100 0.5)"},
        "mig": {"enum": ["off", "static", "dynamic"], "description": "what GPUs in MIG mode are published as"},
        "mpsRoot": ABS_PATH,
        "mpsControl": string_setting(minLength=1),
        "mpsSharing": {"enum": ["namespace", "any"],
                       "description": "namespace: a GPU's MPS server serves one namespace; any: shared across namespaces"},
        "contextMemory": string_setting(pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|k|M|G)?$",
                                        description="device memory charged per CUDA context, e.g. 692Mi; 0: none"),
    })


def ascend_settings() -> dict[str, Any]:
    """`dra run ascend --set` keys (drivers/ascend/settings.py)."""
    return obj({
        "deviceNodes": {"enum": ["cdi", "runtime"]},
        "driverRoot": ABS_PATH,
        "devRoot": ABS_PATH,
        "dcmiLibrary": ABS_PATH,
        "health": {"enum": ["on", "off"], "description": "quote it: unquoted on/off are YAML booleans"},
        "healthInterval": string_setting(pattern=r"^[0-9]+(\.[0-9]+)?$"),
        "sysfs": ABS_PATH,
    })


def hygon_dcu_settings() -> dict[str, Any]:
    """`dra run hygon-dcu --set` keys (drivers/hygon_dcu/settings.py)."""
    return obj({
        "driverRoot": ABS_PATH,
        "devRoot": ABS_PATH,
        "smiLibrary": ABS_PATH,
        "health": {"enum": ["on", "off"], "description": "quote it: unquoted on/off are YAML booleans"},
        "healthInterval": string_setting(pattern=r"^[0-9]+(\.[0-9]+)?$"),
        "sysfs": ABS_PATH,
    })


def cambricon_mlu_settings() -> dict[str, Any]:
    """`dra run cambricon-mlu --set` keys (drivers/cambricon_mlu/settings.py)."""
    return obj({
        "sharing": {"enum": ["smlu", "whole"]},
        "devRoot": ABS_PATH,
        "cndevLibrary": ABS_PATH,
        "health": {"enum": ["on", "off"], "description": "quote it: unquoted on/off are YAML booleans"},
        "healthInterval": string_setting(pattern=r"^[0-9]+(\.[0-9]+)?$"),
        "sysfs": ABS_PATH,
    })


def schemas() -> dict[str, dict[str, Any]]:
    """Chart directory name -> its values.schema.json."""
    return {
        "hami-core-gpu": driver_schema("hami-core-gpu", "hami-core-gpu.project-hami.io", gpu_settings()),
        "ascend": driver_schema("ascend", "ascend.project-hami.io", ascend_settings()),
        "hygon-dcu": driver_schema("hygon-dcu", "hygon-dcu.project-hami.io", hygon_dcu_settings()),
        "cambricon-mlu": driver_schema("cambricon-mlu", "cambricon-mlu.project-hami.io", cambricon_mlu_settings()),
        "dra-webhook": webhook_schema(),
    }


def render(schema: Any) -> str:
    return json.dumps(schema, indent=2) + "\n"


# --- monitoring (docs/monitoring.md): the values of the PodMonitor, PrometheusRule and dashboard,
# and the dashboard itself. The alert rules are templates (dra-common/templates/_monitoring.tpl).

DRIVER_ALERTS = ["daemonDown", "notRegistered", "processUnheld", "memoryOverQuota", "computeOverShare",
                 "deviceUnhealthy", "deviceTainted", "ledgerOversized"]
WEBHOOK_ALERTS = ["webhookDown", "webhookFailing", "webhookRefusing"]
DURATION = {"type": "string", "pattern": r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$", "description": "a Prometheus duration"}
AUTO_ON_OFF = {"enum": ["auto", True, False],
               "description": "auto: on when the cluster serves monitoring.coreos.com/v1 (the Prometheus Operator's CRDs)"}


def monitoring_schema(alerts: list[str], dashboard: bool) -> dict[str, Any]:
    """`monitoring:` of a chart: PodMonitor, PrometheusRule (a `for:` per alert) and, for the
    driver charts, the dashboard ConfigMap."""
    rule: dict[str, Any] = {
        "enabled": AUTO_ON_OFF, "labels": LABEL_MAP,
        "for": obj({a: DURATION for a in alerts}, alerts),
        "window": DURATION,
    }
    if "webhookRefusing" in alerts:
        rule["refusedThreshold"] = {"type": "integer", "minimum": 0}
    parts: dict[str, Any] = {
        "podMonitor": obj({"enabled": AUTO_ON_OFF, "labels": LABEL_MAP, "interval": DURATION, "scrapeTimeout": DURATION},
                          ["enabled", "interval", "scrapeTimeout"]),
        "prometheusRule": obj(rule, ["enabled", "for", "window"]),
    }
    if dashboard:
        parts["dashboard"] = obj({"enabled": AUTO_ON_OFF, "labels": LABEL_MAP, "annotations": LABEL_MAP}, ["enabled"])
    return obj(parts, list(parts))


DASHBOARD_DRIVERS = {"hami-core-gpu": "hami-core-gpu.project-hami.io", "ascend": "ascend.project-hami.io",
                 "hygon-dcu": "hygon-dcu.project-hami.io", "cambricon-mlu": "cambricon-mlu.project-hami.io"}
SEL = 'driver="$driver",node=~"$node"'
"""The label matchers of every dashboard query (the dashboard's variables)."""


def dashboard_panels() -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    """(title, unit, description, [(PromQL, legend)]) of each panel, in order. The first is the
    per-device panel that `dra_dev.monitoring.picture` draws for the README."""
    rate = "$__rate_interval"
    return [
        ("Memory per device: capacity, allocated to claims, used", "bytes",
         "Allocated: the claims' memory quotas on the device, summed; used: what their processes hold (ledgers).",
         [(f'sum by (node, device) (dra_device_capacity{{{SEL},capacity="memory"}})', "{{node}} {{device}} capacity"),
          (f"sum by (node, device) (dra_claim_memory_limit_bytes{{{SEL}}})", "{{node}} {{device}} allocated"),
          (f"sum by (node, device) (dra_claim_memory_used_bytes{{{SEL}}})", "{{node}} {{device}} used")]),
        ("Compute per device: allocated shares vs. used", "percent",
         "Allocated: the claims' compute shares, summed; used: device time the limiter charged them.",
         [(f"sum by (node, device) (dra_claim_compute_limit_percent{{{SEL}}})", "{{node}} {{device}} allocated"),
          (f"100 * sum by (node, device) (rate(dra_claim_compute_seconds_total{{{SEL}}}[{rate}]))",
           "{{node}} {{device}} used")]),
        ("Memory per claim: used vs. quota", "bytes", "Each claim's memory on each of its devices.",
         [(f"dra_claim_memory_used_bytes{{{SEL}}}", "{{namespace}}/{{claim}} on {{device}} used"),
          (f"dra_claim_memory_limit_bytes{{{SEL}}}", "{{namespace}}/{{claim}} on {{device}} quota")]),
        ("Compute per claim: used vs. share", "percent", "Each claim's share and the device time charged to it.",
         [(f"100 * rate(dra_claim_compute_seconds_total{{{SEL}}}[{rate}])", "{{namespace}}/{{claim}} on {{device}} used"),
          (f"dra_claim_compute_limit_percent{{{SEL}}}", "{{namespace}}/{{claim}} on {{device}} share")]),
        ("Throttling: time claims' threads waited for their share", "percentunit",
         "Seconds waited per second: 0.5 = its threads spent half their time held back by the limiter.",
         [(f"rate(dra_claim_compute_throttled_seconds_total{{{SEL}}}[{rate}])", "{{namespace}}/{{claim}} on {{device}}")]),
        ("Watchdog verdicts", "short",
         "Verdicts given (unheld process, memory over quota, compute over share); each is also an Event.",
         [(f"sum by (verdict) (increase(dra_watchdog_verdicts_total{{{SEL}}}[{rate}]))", "{{verdict}}")]),
        ("Processes per device: all vs. unheld", "short",
         "Unheld: processes no claim's hook holds (their quota is not enforced).",
         [(f"sum by (node, device) (dra_device_processes{{{SEL}}})", "{{node}} {{device}} processes"),
          (f"sum by (node, device) (dra_device_processes_unheld{{{SEL}}})", "{{node}} {{device}} unheld")]),
        ("Daemons: registered with kubelet, devices healthy", "short",
         "1 = registered / healthy. A device's unhealthy state and its taints are in the alerts.",
         [(f"dra_kubelet_registered{{{SEL}}}", "{{node}} registered"),
          (f'dra_device_health{{{SEL},state="healthy"}}', "{{node}} {{device}} healthy")]),
    ]


def dashboard(chart: str, driver: str) -> dict[str, Any]:
    """The Grafana dashboard of a driver chart (uid and default driver per chart, so several charts'
    dashboards live side by side)."""
    panels = []
    for i, (title, unit, description, queries) in enumerate(dashboard_panels()):
        panels.append({
            "id": i + 1, "type": "timeseries", "title": title, "description": description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 24 if i == 0 else 12, "x": 0 if i == 0 else 12 * ((i - 1) % 2), "y": 8 * ((i + 1) // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "right", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": [{"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for j, (expr, legend) in enumerate(queries)],
        })
    variable = {"type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"}, "refresh": 2,
                "includeAll": False, "multi": False}
    return {
        "uid": f"dra-{chart}", "title": f"DRA {chart}: devices and claims", "tags": ["dra", "dra-hami", chart],
        "timezone": "browser", "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"},
            {**variable, "name": "driver", "label": "Driver", "query": "label_values(dra_published_devices, driver)",
             "current": {"text": driver, "value": driver}},
            {**variable, "name": "node", "label": "Node", "includeAll": True, "multi": True, "allValue": ".*",
             "query": 'label_values(dra_published_devices{driver="$driver"}, node)'},
        ]},
        "panels": panels,
    }


def dashboards() -> dict[Path, str]:
    """Each driver chart's files/dashboard.json."""
    return {HELM_DIR / chart / "files" / "dashboard.json": render(dashboard(chart, driver)) for chart, driver in DASHBOARD_DRIVERS.items()}


WEBHOOK_CONFIGURATIONS = HELM_DIR / "dra-webhook" / "files" / "webhook-configurations.json"
PLACEHOLDERS = {"name": "__NAME__", "namespace": "__NAMESPACE__", "service": "__SERVICE__", "ca_bundle": "__CA_BUNDLE__"}


def webhook_configurations() -> list[dict[str, Any]]:
    """The two configurations with placeholders, for the drivers this distribution installs."""
    from dra._runtime import registry
    from dra.webhook import registration, vendors

    mutating, validating = registration.configurations(
        vendors.load(None), PLACEHOLDERS["ca_bundle"], service=(PLACEHOLDERS["namespace"], PLACEHOLDERS["service"], 443),
        namespace=PLACEHOLDERS["namespace"], name=PLACEHOLDERS["name"], drivers=sorted(registry.driver_classes()))
    return [mutating, validating]


def generated() -> dict[Path, str]:
    """Every generated file and its content."""
    files = {HELM_DIR / chart / "values.schema.json": render(schema) for chart, schema in schemas().items()}
    files[WEBHOOK_CONFIGURATIONS] = render(webhook_configurations())
    files.update(dashboards())
    return files


def main() -> int:
    for path, text in generated().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(HELM_DIR.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
