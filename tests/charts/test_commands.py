"""The charts' commands are the daemon's: drift between a chart and the CLI it runs fails here.

Each container command a chart renders (`dra run ...`, `dra hookdir install ...`) is
parsed by that command's own typer CLI, with the container's environment, as the container would
run it; then the ports and paths the parsed flags name must be the ones the pod exposes and
mounts, the driver must be installed under the chart's entry point with the chart's DRA driver
name, and every driver setting the schema allows must be one the driver accepts.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import typer
from chart_helpers import DRIVER_CHARTS, HELM_DIR, ROOT, Tool, container, one, render
from test_render import VALUE_SETS, chart_values
from typer.main import get_command

import dra
from dra._runtime import flags, registry
from dra._runtime.daemon import DaemonSettings
from dra._runtime.kubelet.paths import KubeletPaths

# What the downward API gives the container (fieldRef values) in these tests.
FIELD_VALUES = {"spec.nodeName": "node-a", "metadata.uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
                "metadata.namespace": "dra-system", "status.podIP": "10.0.0.7"}
ENVVARS_OF_THE_CLI = ("NODE_NAME", "POD_UID", "KUBECONFIG", "DRA_FAKE_DEVICES")


def container_env(c: dict[str, Any]) -> dict[str, str]:
    env = {}
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e.get("valueFrom", {}):
            env[e["name"]] = FIELD_VALUES[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command and args (unknown names stay as written)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def cli_for(command: list[str]) -> tuple[Any, str, list[str]]:
    """The click command a container command line runs, its name, and the words after it."""
    assert command[0] == "dra", f"the charts run the public `dra` command, not {command}"
    from dra.cli import build_app

    cmd: Any = get_command(build_app(command[1]))
    words = command[1:]
    name = "dra"
    while hasattr(cmd, "list_commands"):  # a group (typer may vendor click: no isinstance on click's classes)
        sub = cmd.get_command(typer.Context(cmd), words[0])
        assert sub is not None, f"`{name} {words[0]}` does not exist; the chart runs {command}"
        name, cmd, words = f"{name} {words[0]}", sub, words[1:]
    return cmd, name, words


def parse(c: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]]:
    """Parse a rendered container's command + args with the CLI it runs, in its environment."""
    env = container_env(c)
    for name in ENVVARS_OF_THE_CLI:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cmd, name, words = cli_for([expand(a, env) for a in c["command"]])
    args = words + [expand(a, env) for a in c.get("args") or []]
    try:
        ctx = cmd.make_context(name, list(args))  # click consumes the list it is given
    except Exception as exc:  # click's UsageError / BadParameter (typer may vendor click)
        if not hasattr(exc, "format_message"):
            raise
        raise AssertionError(f"`{name}` refuses the chart's arguments {args}: {exc.format_message()}") from exc
    return name, ctx.params


def mounted_paths(c: dict[str, Any]) -> list[Path]:
    return [Path(m["mountPath"]) for m in c.get("volumeMounts") or []]


def under_a_mount(path: Path, c: dict[str, Any]) -> bool:
    return any(path == m or m in path.parents for m in mounted_paths(c))


def pod(chart: str, helm: Tool, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    objects = render(helm, chart, values=values)
    return objects, one(objects, "DaemonSet")["spec"]["template"]["spec"]


def entry_points() -> dict[str, str]:
    """pyproject's `dra.drivers` entry points (what the image installs)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"][registry.DRIVERS])


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_the_daemon_accepts_every_flag_the_chart_passes(helm: Tool, monkeypatch: pytest.MonkeyPatch, chart: str,
                                                        name: str) -> None:
    values = chart_values(chart, name)
    _objects, spec = pod(chart, helm, values)
    daemon = container(spec, "daemon")
    cli, params = parse(daemon, monkeypatch)
    assert cli == "dra run"
    settings = flags.build(DaemonSettings, params)
    assert settings.node_name == FIELD_VALUES["spec.nodeName"] and settings.pod_uid == FIELD_VALUES["metadata.uid"]
    assert settings.kubeconfig is None, "in a pod the daemon uses its service account"
    # The port the daemon serves is the port the pod declares and the probes ask.
    assert daemon["ports"][0]["containerPort"] == settings.metrics_port
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert daemon[probe]["httpGet"]["port"] == daemon["ports"][0]["name"]
    # Every directory the daemon writes is a host path mounted at the same path.
    driver_name = values.get("driver.name") or _default(chart, "driver", "name")
    state_dir = settings.state_dir or settings.plugin_dir / driver_name / "state"
    for path in (settings.registrar_dir, settings.plugin_dir / driver_name, settings.cdi_dir, settings.hook_dir, state_dir):
        assert under_a_mount(path, daemon), f"{path} is not mounted into the daemon's container"
    assert dict(settings.driver_settings) == dict(values.get("daemon.settings") or {})
    assert settings.fake == (values.get("daemon.fake") or None)


def _default(chart: str, *keys: str) -> Any:
    import yaml

    node: Any = yaml.safe_load((HELM_DIR / chart / "values.yaml").read_text())
    for k in keys:
        node = node[k]
    return node


# Each value of the charts' `daemon` and `paths` that becomes a flag of `dra run`, and the field of
# DaemonSettings the flag sets. daemon.metricsBind picks --metrics-address's value; extraArgs are flags.
VALUE_FIELDS = {
    "paths.kubeletPluginsDir": "plugin_dir", "paths.kubeletRegistrarDir": "registrar_dir", "paths.cdiDir": "cdi_dir",
    "paths.hookDir": "hook_dir", "daemon.settings": "driver_settings", "daemon.fake": "fake", "daemon.preload": "preload",
    "daemon.metricsPort": "metrics_port", "daemon.allowClaimLoosening": "allow_claim_loosening",
    "daemon.grpcWorkers": "grpc_workers", "daemon.logFormat": "log_format", "daemon.logLevel": "log_level",
    "daemon.watchdog.action": "watchdog",
}
NOT_A_FIELD = {"daemon.metricsBind", "daemon.extraArgs", "paths.sharedHostDirs"}  # sharedHostDirs: mounts, no flag
# Every value above away from its default, so that every optional flag of the template is written.
EVERY_FLAG = {
    "paths.kubeletPluginsDir": "/k/plugins", "paths.kubeletRegistrarDir": "/k/registry", "paths.cdiDir": "/k/cdi",
    "paths.hookDir": "/k/hooks", "daemon.settings": {"health": "off"}, "daemon.fake": "demo", "daemon.preload": "env",
    "daemon.metricsPort": 9464, "daemon.allowClaimLoosening": True, "daemon.grpcWorkers": 40, "daemon.logFormat": "text",
    "daemon.logLevel": "debug", "daemon.watchdog.action": "kill", "daemon.metricsBind": "podIP",
    "daemon.extraArgs": ["--state-dir=/k/state", "--slice-layout=packed"], "paths.sharedHostDirs": ["/k/mps"],
}


def _leaves(schema: dict[str, Any], prefix: str) -> set[str]:
    """Dotted keys of the values a schema allows under `prefix` (the driver settings count as one)."""
    if "properties" not in schema or prefix == "daemon.settings":
        return {prefix}
    return set().union(*(_leaves(v, f"{prefix}.{k}") for k, v in schema["properties"].items()))


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_each_flag_the_chart_writes_is_a_field_of_the_daemons_settings_and_sets_the_value_it_comes_from(
        helm: Tool, monkeypatch: pytest.MonkeyPatch, chart: str) -> None:
    """A flag renamed in the template or in DaemonSettings (where each flag is declared, once), or a
    chart value that stops reaching its field, fails here."""
    schema = json.loads((HELM_DIR / chart / "values.schema.json").read_text())["properties"]
    known = _leaves(schema["daemon"], "daemon") | _leaves(schema["paths"], "paths")
    assert known == set(VALUE_FIELDS) | NOT_A_FIELD, f"a value of {chart}'s daemon or paths this test does not map to a field"
    assert known == set(EVERY_FLAG)
    _objects, spec = pod(chart, helm, EVERY_FLAG)
    daemon = container(spec, "daemon")
    assert daemon["command"] == ["dra", "run"]
    entry, *args = [expand(a, container_env(daemon)) for a in daemon["args"]]
    assert entry == _default(chart, "driver", "entryPoint")
    fields = flags.names(DaemonSettings)
    written = [a.partition("=")[0] for a in args]
    for name in written:
        assert name in fields, f"{chart} passes {name}, which no field of DaemonSettings declares: {sorted(fields)}"
    assert len(set(written)) == len(written), f"{chart} passes a flag twice: {written}"
    _cli, params = parse(daemon, monkeypatch)
    settings = flags.build(DaemonSettings, params)
    for key, field in VALUE_FIELDS.items():
        given = EVERY_FLAG[key]
        want = Path(given) if isinstance(given, str) and given.startswith("/") else given
        assert getattr(settings, field) == want, f"{chart}'s {key} ({given!r}) does not reach DaemonSettings.{field}"
        assert flags.of(DaemonSettings, field).name in written
    assert settings.metrics_address == FIELD_VALUES["status.podIP"]
    assert (settings.state_dir, settings.slice_layout) == (Path("/k/state"), "packed")
    assert settings.node_name == FIELD_VALUES["spec.nodeName"] and settings.pod_uid == FIELD_VALUES["metadata.uid"]


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_hook_installer_accepts_the_charts_arguments_and_installs_into_the_daemons_hook_dir(
        helm: Tool, monkeypatch: pytest.MonkeyPatch, chart: str) -> None:
    module, _, attr = entry_points()[_default(chart, "driver", "entryPoint")].partition(":")
    if getattr(import_module(module), attr).shares_held_by_device:
        # the vendor's partitioning holds the shares: the chart installs no hook, and says so
        assert _default(chart, "hook") == {"install": False, "libraries": []}
        for name in ("defaults", "other-host-layout"):
            assert not pod(chart, helm, chart_values(chart, name))[1].get("initContainers")
        return
    for name in ("defaults", "other-host-layout"):
        _objects, spec = pod(chart, helm, chart_values(chart, name))
        init = container(spec, "install-hooks", init=True)
        cli, params = parse(init, monkeypatch)
        assert cli == "dra hookdir install"
        _cli, daemon = parse(container(spec, "daemon"), monkeypatch)
        assert params["hook_dir"] == daemon["hook_dir"]
        assert under_a_mount(params["hook_dir"], init)
        for stem in params["libraries"]:
            assert dra.hook_library(stem).is_file(), f"the chart installs lib{stem}.so, which this tree does not build"


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_charts_driver_is_installed_under_its_entry_point_with_its_name(chart: str) -> None:
    entry, name = _default(chart, "driver", "entryPoint"), _default(chart, "driver", "name")
    target = entry_points().get(entry)
    assert target is not None, f"pyproject.toml registers no {registry.DRIVERS} entry point {entry!r}"
    module, _, attr = target.partition(":")
    driver_class = getattr(import_module(module), attr)
    assert driver_class.name == name, f"the chart's driver.name {name} is not the driver's {driver_class.name}"


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(w.capitalize() for w in rest)


SAMPLES = {"driverRoot": "/run/nvidia/driver", "devRoot": "/", "sysfs": "/sys", "dcmiLibrary": "/usr/local/dcmi/libdcmi.so",
           "deviceMemory": "96Gi", "healthProbeInterval": "5", "healthInterval": "5", "fullLoadClockMhz": "1500",
           "clockElasticity": "0.45",
           "mpsRoot": "/run/hami-core-gpu/mps", "mpsControl": "nvidia-cuda-mps-control", "contextMemory": "692Mi",
           "smiLibrary": "/opt/hyhal/lib/librocm_smi64.so",
           "sharing": "whole", "cndevLibrary": "/usr/lib64/libcndev.so"}


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_schema_allows_exactly_the_drivers_settings(chart: str) -> None:
    """daemon.settings become `--set key=value`: the schema must know the driver's keys (a new
    setting without a schema entry could not be set) and only those (a typo fails at install)."""
    package = chart.replace("-", "_")
    settings_module = import_module(f"drivers.{package}.settings")
    schema = json.loads((HELM_DIR / chart / "values.schema.json").read_text())
    allowed = schema["properties"]["daemon"]["properties"]["settings"]["properties"]
    known = {_camel(f.name) for f in dataclasses.fields(settings_module.Settings)}
    assert set(allowed) == known, f"helm/generate.py must list {chart}'s settings (and only those)"
    for key, rule in allowed.items():
        sample = rule["enum"][-1] if "enum" in rule else SAMPLES.get(key, "nvidia.com/gpu")
        settings_module.Settings.parse({key: sample})  # the driver accepts what the schema lets through


@pytest.mark.parametrize(("given", "want"), [("0.45", 0.45), (0.45, 0.45), (1, 1.0), ("0", 0.0), (0.005, 0.005)])
def test_the_gpu_models_clock_elasticity_reaches_the_daemon_quoted_or_not(
        helm: Tool, monkeypatch: pytest.MonkeyPatch, given: Any, want: float) -> None:
    """daemon.settings.clockElasticity, a number or its quoted spelling: the schema lets both through
    and `--set=clockElasticity=...` is what the driver parses to the same value."""
    from drivers.hami_core_gpu.settings import Settings

    _objects, spec = pod("hami-core-gpu", helm, {"daemon.settings": {"clockElasticity": given}})
    _cli, params = parse(container(spec, "daemon"), monkeypatch)
    assert Settings.parse(flags.build(DaemonSettings, params).driver_settings).clock_elasticity == want


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_charts_default_socket_paths_fit_a_unix_socket_address(helm: Tool, chart: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _objects, spec = pod(chart, helm, {})
    _cli, params = parse(container(spec, "daemon"), monkeypatch)
    paths = KubeletPaths(registrar_dir=params["registrar_dir"], plugins_dir=params["plugin_dir"])
    for name in DRIVER_CHARTS:
        paths.resolve(_default(name, "driver", "name"), params["pod_uid"]).check_socket_lengths()
