"""The charts as `helm lint` and `helm template` see them (real helm, no cluster).

What every driver chart must render: a DaemonSet that rolls node by node with per-pod sockets,
probes on the daemon's endpoints, host paths at the same path inside and out, least privilege,
the hook installer, DeviceClasses, RBAC and the ResourceSlice node policy; and bad values must
fail with the schema's message before anything is created.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
import yaml
from chart_helpers import DRIVER_CHARTS, HELM_DIR, ROOT, Tool, container, kinds, one, render, render_error, set_args

# Values sets every chart must lint and render with (beyond its defaults).
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "fake-devices-and-extended-resource": {
        "daemon.fake": "demo",
        "daemon.logLevel": "debug",
        "deviceClasses": "EXTENDED",  # filled per chart: Helm replaces a list set by index
        "kubeletPlugin.tolerations": [{"operator": "Exists"}],
    },
    "bring-your-own-service-account": {
        "serviceAccount.create": False,
        "serviceAccount.name": "node-daemon",
        "sliceNodePolicy.enabled": False,
        "hook.install": False,
        "kubeletPlugin.nodeSelector": None,
        "kubeletPlugin.updateStrategy": {"type": "OnDelete"},
    },
    "other-host-layout": {
        "paths.kubeletPluginsDir": "/var/lib/k0s/kubelet/plugins",
        "paths.kubeletRegistrarDir": "/var/lib/k0s/kubelet/plugins_registry",
        "paths.cdiDir": "/etc/cdi",
        "paths.hookDir": "/opt/dra-hookcore",
        "daemon.metricsPort": 9464,
        "daemon.preload": "env",
        "kubeletPlugin.privileged": True,
        "image.digest": "sha256:" + "a" * 64,
    },
}

DEFAULT_NODE_LABEL = {"hami-core-gpu": {"gpu": "on"}, "ascend": {"ascend": "on"}, "hygon-dcu": {"dcu": "on"},
                      "cambricon-mlu": {"mlu": "on"}}
DRIVER_NAME = {"hami-core-gpu": "hami-core-gpu.project-hami.io", "ascend": "ascend.project-hami.io",
               "hygon-dcu": "hygon-dcu.project-hami.io", "cambricon-mlu": "cambricon-mlu.project-hami.io"}


# A second DeviceClass carrying the driver's config for its claims, per chart.
CONFIG_CLASS: dict[str, dict[str, Any]] = {
    "hami-core-gpu": {"apiVersion": "hami-core-gpu.project-hami.io/v1alpha1", "kind": "GpuConfig",
                      "computeMode": "strict", "fullLoadClockMhz": 1500, "clockElasticity": 0.45},
    "ascend": {"apiVersion": "ascend.project-hami.io/v1alpha1", "kind": "NpuConfig", "preload": "env"},
    "hygon-dcu": {"apiVersion": "hygon-dcu.project-hami.io/v1alpha1", "kind": "DcuConfig", "preload": "env"},
    "cambricon-mlu": {"apiVersion": "cambricon-mlu.project-hami.io/v1alpha1", "kind": "MluConfig", "computeLimit": False},
}


def chart_values(chart: str, name: str) -> dict[str, Any]:
    """A value set for `chart`; lists are set whole (`--set list[0].x` would drop the rest of the element)."""
    values = dict(VALUE_SETS[name])
    if values.get("deviceClasses") == "EXTENDED":
        classes = with_extended_resource(chart, "example.com/device")
        values["deviceClasses"] = [*classes, {**classes[0], "name": f"configured.{classes[0]['name']}",
                                              "extendedResourceName": "", "parameters": CONFIG_CLASS[chart]}]
    return values


def with_extended_resource(chart: str, resource: str) -> list[dict[str, Any]]:
    classes = yaml.safe_load((HELM_DIR / chart / "values.yaml").read_text())["deviceClasses"]
    return [{**classes[0], "extendedResourceName": resource}, *classes[1:]]


def daemonset(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "DaemonSet")


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = daemonset(objects)["spec"]["template"]["spec"]
    return spec


def host_paths(spec: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_and_template_pass_for_every_value_set(helm: Tool, chart: str, name: str) -> None:
    lint = helm.run("lint", "--strict", "--kube-version", "1.34.4", str(HELM_DIR / chart), *set_args(chart_values(chart, name)),
                    check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    objects = render(helm, chart, values=chart_values(chart, name))
    assert {"DaemonSet", "ClusterRole", "ClusterRoleBinding", "DeviceClass"} <= set(kinds(objects))


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_daemonset_rolls_node_by_node_with_per_pod_sockets(helm: Tool, chart: str) -> None:
    objects = render(helm, chart)
    ds = daemonset(objects)
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    daemon = container(pod_spec(objects), "daemon")
    env = {e["name"]: e for e in daemon["env"]}
    assert env["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "--pod-uid=$(POD_UID)" in daemon["args"] and "--node-name=$(NODE_NAME)" in daemon["args"]
    assert daemon["args"][0] == chart  # the entry point: `dra run <chart>`


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
@pytest.mark.parametrize("port", [8080, 9464])
def test_probes_ask_the_daemons_health_endpoints_on_its_metrics_port(helm: Tool, chart: str, port: int) -> None:
    daemon = container(pod_spec(render(helm, chart, values={"daemon.metricsPort": port})), "daemon")
    assert daemon["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    assert f"--metrics-port={port}" in daemon["args"]
    assert daemon["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert daemon["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert daemon["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_nodes_are_selected_as_hamis_users_label_them(helm: Tool, chart: str) -> None:
    spec = pod_spec(render(helm, chart))
    assert spec["nodeSelector"] == DEFAULT_NODE_LABEL[chart]
    assert spec["priorityClassName"] == "system-node-critical"
    assert "nodeSelector" not in pod_spec(render(helm, chart, values={"kubeletPlugin.nodeSelector": None}))


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
@pytest.mark.parametrize("layout", ["defaults", "other-host-layout"])
def test_host_paths_are_mounted_where_the_host_has_them_and_named_in_the_flags(helm: Tool, chart: str, layout: str) -> None:
    values = chart_values(chart, layout)
    spec = pod_spec(render(helm, chart, values=values))
    daemon = container(spec, "daemon")
    hosts = host_paths(spec)
    mounts = {m["name"]: m["mountPath"] for m in daemon["volumeMounts"]}
    for name, path in hosts.items():
        if name in mounts:
            assert mounts[name] == path, f"{name}: kubelet and the runtime name host paths, so the container must see {path}"
    plugins = values.get("paths.kubeletPluginsDir", "/var/lib/kubelet/plugins")
    registrar = values.get("paths.kubeletRegistrarDir", "/var/lib/kubelet/plugins_registry")
    cdi = values.get("paths.cdiDir", "/var/run/cdi")
    hook = values.get("paths.hookDir", "/var/lib/dra-hookcore")
    # Only this driver's own plugin directory, not every plugin's.
    assert hosts["plugin-dir"] == f"{plugins}/{DRIVER_NAME[chart]}"
    assert hosts["plugins-registry"] == registrar and hosts["cdi-dir"] == cdi and hosts["hook-dir"] == hook
    args = daemon["args"]
    for flag in (f"--plugin-dir={plugins}", f"--registrar-dir={registrar}", f"--cdi-dir={cdi}", f"--hook-dir={hook}"):
        assert flag in args


def test_the_gpu_daemon_runs_without_privileges_or_capabilities(helm: Tool) -> None:
    spec = pod_spec(render(helm, "hami-core-gpu", values={"daemon.watchdog.action": "off"}))
    for c in [*spec["containers"], *spec.get("initContainers", [])]:
        sc = c["securityContext"]
        assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"] is True
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in spec and "hostPID" not in spec
    # The watchdog (on by default) adds the host PID namespace, CAP_KILL and CAP_SYS_PTRACE (maps: the
    # proof of a held process a tenant cannot forge, review 2026-12-04 #3) to the daemon alone.
    watched = pod_spec(render(helm, "hami-core-gpu"))
    assert watched["hostPID"] is True and "--watchdog=report" in container(watched, "daemon")["args"]
    assert container(watched, "daemon")["securityContext"]["capabilities"] == {
        "drop": ["ALL"], "add": ["KILL", "SYS_PTRACE"]}
    assert all(c["securityContext"]["capabilities"] == {"drop": ["ALL"]} for c in watched.get("initContainers", []))
    privileged = pod_spec(render(helm, "hami-core-gpu", values={"kubeletPlugin.privileged": True}))
    assert container(privileged, "daemon")["securityContext"]["privileged"] is True


@pytest.mark.parametrize("chart", ["hami-core-gpu", "hygon-dcu", "ascend", "cambricon-mlu"])
def test_the_drivers_that_list_processes_run_the_watchdog_in_the_host_pid_namespace(helm: Tool, chart: str) -> None:
    """The drivers whose `processes()` the watchdog polls (NVML's list, ROCm SMI's, DCMI's, CNDev's) get it on by
    default with what it needs: the host PID namespace (the libraries name host PIDs) and the
    daemon's --watchdog; without hostPID every process would be one the daemon cannot see."""
    on = pod_spec(render(helm, chart))
    assert on["hostPID"] is True and "--watchdog=report" in container(on, "daemon")["args"]
    off = pod_spec(render(helm, chart, values={"daemon.watchdog.action": "off"}))
    assert "hostPID" not in off and "--watchdog=off" in container(off, "daemon")["args"]


def test_the_ascend_daemon_is_privileged_for_dcmi_and_reads_the_driver_read_only(helm: Tool) -> None:
    spec = pod_spec(render(helm, "ascend"))
    daemon = container(spec, "daemon")
    assert daemon["securityContext"] == {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True}
    assert {"name": "ascend-driver", "mountPath": "/usr/local/Ascend/driver", "readOnly": True} in daemon["volumeMounts"]
    unprivileged = container(pod_spec(render(helm, "ascend", values={"kubeletPlugin.privileged": False})), "daemon")
    # the watchdog (on by default) adds only what it needs: CAP_KILL, CAP_SYS_PTRACE (maps)
    assert unprivileged["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["KILL", "SYS_PTRACE"]}
    bare = container(pod_spec(render(helm, "ascend", values={"kubeletPlugin.privileged": False,
                                                            "daemon.watchdog.action": "off"})), "daemon")
    assert bare["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_an_init_container_installs_the_hook_library_with_the_daemons_installer(helm: Tool) -> None:
    spec = pod_spec(render(helm, "hami-core-gpu"))
    init = container(spec, "install-hooks", init=True)
    assert init["command"] == ["dra", "hookdir", "install"]
    assert init["args"] == ["--hook-dir=/var/lib/dra-hookcore", "vgpu"]
    assert init["volumeMounts"] == [{"name": "hook-dir", "mountPath": "/var/lib/dra-hookcore"}]
    assert init["image"] == container(spec, "daemon")["image"], "the library installed must be the one the daemon ships"
    assert "initContainers" not in pod_spec(render(helm, "hami-core-gpu", values={"hook.install": False}))
    ascend = container(pod_spec(render(helm, "ascend")), "install-hooks", init=True)
    assert ascend["args"] == ["--hook-dir=/var/lib/dra-hookcore", "vnpu"]


def device_classes(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rendered DeviceClasses by name."""
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "DeviceClass"}


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_device_classes_with_an_optional_extended_resource(helm: Tool, chart: str) -> None:
    cls = device_classes(render(helm, chart))[DRIVER_NAME[chart]]
    assert cls["apiVersion"] == "resource.k8s.io/v1"
    assert f"device.driver == '{DRIVER_NAME[chart]}'" in cls["spec"]["selectors"][0]["cel"]["expression"]
    assert "extendedResourceName" not in cls["spec"]
    ext = device_classes(render(helm, chart, values={"deviceClasses": with_extended_resource(chart, "example.com/npu")}))
    assert ext[DRIVER_NAME[chart]]["spec"]["extendedResourceName"] == "example.com/npu"


DRIVER_CLASS = {"hami-core-gpu": "drivers.hami_core_gpu.driver:HamiCoreGpuDriver",
                "ascend": "drivers.ascend.driver:AscendDriver", "hygon-dcu": "drivers.hygon_dcu.driver:HygonDcuDriver",
                "cambricon-mlu": "drivers.cambricon_mlu.driver:CambriconMluDriver"}


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_a_device_class_can_carry_the_drivers_config_for_its_claims(helm: Tool, chart: str) -> None:
    """An admin's second class whose claims get the driver's config (a strict cap, an env preload):
    rendered as the class's opaque config, and the driver's own decoder (prepare's and the
    webhook's) accepts it."""
    import importlib

    import dra

    classes = device_classes(render(helm, chart, values=chart_values(chart, "fake-devices-and-extended-resource")))
    plain, configured = classes[DRIVER_NAME[chart]], classes[f"configured.{DRIVER_NAME[chart]}"]
    assert "config" not in plain["spec"]
    (config,) = configured["spec"]["config"]
    assert config["opaque"] == {"driver": DRIVER_NAME[chart], "parameters": CONFIG_CLASS[chart]}
    module, cls = DRIVER_CLASS[chart].split(":")
    decoded = dra.decode_config(getattr(importlib.import_module(module), cls), config["opaque"]["parameters"])
    assert decoded.preload == CONFIG_CLASS[chart].get("preload")
    assert getattr(decoded, "compute_mode", None) == CONFIG_CLASS[chart].get("computeMode")
    assert getattr(decoded, "clock_elasticity", None) == CONFIG_CLASS[chart].get("clockElasticity")


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_chart_device_class_is_the_examples_one(helm: Tool, chart: str) -> None:
    """Users who apply examples/<driver>/deviceclass.yaml and users of the chart get one class."""
    example = ROOT / "examples" / chart / "deviceclass.yaml"
    want = yaml.safe_load(example.read_text())
    got = device_classes(render(helm, chart))[want["metadata"]["name"]]
    assert got["spec"] == want["spec"]


# The classes of the modes each daemon serves (modeClasses), on by default, and the example files
# that give users without Helm the same classes.
MODE_CLASSES = {
    "hami-core-gpu": {"mig": "mig.hami-core-gpu.project-hami.io", "mps": "mps.hami-core-gpu.project-hami.io",
                      "strict": "strict.hami-core-gpu.project-hami.io",
                      "memoryOnly": "memory-only.hami-core-gpu.project-hami.io"},
    "ascend": {"memoryOnly": "memory-only.ascend.project-hami.io"},
    "hygon-dcu": {}, "cambricon-mlu": {},
}
MODE_CLASS_EXAMPLES = ("examples/hami-core-gpu/mig-mps/deviceclasses.yaml", "examples/hami-compat/deviceclasses.yaml")


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_chart_ships_the_classes_of_every_mode_its_daemon_serves(helm: Tool, chart: str) -> None:
    """Each on by default, each its own value off; a class an example file also writes is that
    class exactly (so `kubectl apply` of the file after `helm install` changes nothing); each
    class's config is one the driver's own decoder takes, meaning what the class's name says."""
    import importlib

    import dra

    rendered = device_classes(render(helm, chart))
    assert set(rendered) == {DRIVER_NAME[chart], *MODE_CLASSES[chart].values()}
    examples = {o["metadata"]["name"]: o for path in MODE_CLASS_EXAMPLES for o in yaml.safe_load_all((ROOT / path).read_text())}
    module, cls = DRIVER_CLASS[chart].split(":")
    driver = getattr(importlib.import_module(module), cls)
    for key, name in MODE_CLASSES[chart].items():
        got = rendered[name]
        if name in examples:
            assert got["spec"] == examples[name]["spec"], name
        configs = [c["opaque"] for c in got["spec"].get("config", [])]
        decoded = [dra.decode_config(driver, c["parameters"]) for c in configs if c["driver"] == DRIVER_NAME[chart]]
        meaning = {"mig": [], "mps": [("sharing", "mps")], "strict": [("compute_mode", "strict")],
                   "memoryOnly": [("compute_limit", False)]}[key]
        assert [(f, getattr(d, f)) for d in decoded for f, _ in meaning] == meaning, name
        off = device_classes(render(helm, chart, values={f"modeClasses.{key}.enabled": False}))
        assert name not in off and set(off) == set(rendered) - {name}


def test_every_class_the_webhook_sends_hami_pods_to_is_shipped_by_a_chart(helm: Tool) -> None:
    """The mapping's memory-only classes, its modes' classes and its MIG profiles' class: after
    `helm install` of the drivers' charts, no HAMi pod meets a missing class."""
    from dra.webhook import vendors

    named = set()
    for v in vendors.load().vendors:
        named.add(v.device_class)
        if v.memory_only:
            named.add(v.memory_only.device_class)
        if v.mode:
            named.update(m.device_class for m in v.mode.others)
        if v.profiles:
            named.add(v.profiles.device_class)
    shipped = {n for chart in DRIVER_CHARTS for n in device_classes(render(helm, chart))}
    assert named <= shipped, named - shipped


def test_the_fence_covers_the_shared_mode_classes_not_the_whole_mig_devices(helm: Tool) -> None:
    objects = render(helm, "hami-core-gpu", extra=["--kube-version", "v1.34.4"])
    (claims,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and not o["metadata"]["name"].endswith("-pods")
                 and "classes" in json.dumps(o)]
    classes = json.loads(next(v["expression"] for v in claims["spec"]["variables"] if v["name"] == "classes"))
    gpu = MODE_CLASSES["hami-core-gpu"]
    assert classes == sorted([DRIVER_NAME["hami-core-gpu"], gpu["memoryOnly"], gpu["mps"], gpu["strict"]])
    assert gpu["mig"] not in classes


@pytest.mark.parametrize(("values", "message"), [
    ({"daemon.settings.mig": "off"},
     "modeClasses.mig.enabled is true but daemon.settings.mig is \"off\", with which the daemon serves no device of class"
     " mig.hami-core-gpu.project-hami.io; set modeClasses.mig.enabled=false"),
    ({"paths.sharedHostDirs": []},
     "modeClasses.mps.enabled is true but /run/hami-core-gpu/mps (daemon.settings.mpsRoot) is not in paths.sharedHostDirs"),
    ({"daemon.settings.mpsRoot": "/run/mps"}, "/run/mps (daemon.settings.mpsRoot) is not in paths.sharedHostDirs"),
    ({"modeClasses.strict.name": "hami-core-gpu.project-hami.io"},
     "DeviceClass hami-core-gpu.project-hami.io is named twice"),
    ({"modeClasses.mig.enabled": "yes"}, "at '/modeClasses/mig/enabled': got string, want boolean"),
    ({"modeClasses.mgi": {"enabled": False}}, "at '/modeClasses/mgi': missing properties 'name', 'selector'"),
    ({"modeClasses.mps.name": "MPS_Class"}, "at '/modeClasses/mps/name'"),
    ({"modeClasses.mig.offWhen": {"mig": False}}, "at '/modeClasses/mig/offWhen/mig': got boolean, want string"),
    ({"paths.sharedHostDirs": ["run/mps"]}, "at '/paths/sharedHostDirs/0'"),
])
def test_a_mode_class_the_daemon_would_not_serve_or_a_bad_one_is_refused_naming_the_value(
        helm: Tool, values: dict[str, Any], message: str) -> None:
    error = render_error(helm, "hami-core-gpu", values=values)
    assert message in error, error


def test_mode_classes_the_daemon_serves_with_other_values_render(helm: Tool) -> None:
    """mig "off" with its class off; another MPS root shared; under daemon.fake no host dir is needed."""
    for values in ({"daemon.settings.mig": "off", "modeClasses.mig.enabled": False},
                   {"daemon.settings.mpsRoot": "/run/mps", "paths.sharedHostDirs": ["/run/mps"]},
                   {"daemon.fake": "h200x8", "paths.sharedHostDirs": []}):
        objects = render(helm, "hami-core-gpu", values=values)
        mounts = container(pod_spec(objects), "daemon")["volumeMounts"]
        assert [m["mountPath"] for m in mounts if m["name"].startswith("shared-host-dir-")] == values.get(
            "paths.sharedHostDirs", ["/run/hami-core-gpu/mps"])
    volumes = pod_spec(render(helm, "hami-core-gpu"))["volumes"]
    assert {"name": "shared-host-dir-0", "hostPath": {"path": "/run/hami-core-gpu/mps", "type": "DirectoryOrCreate"}} in volumes


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_rbac_grants_only_what_the_daemon_calls(helm: Tool, chart: str) -> None:
    objects = render(helm, chart, namespace="gpu-system")
    rules = {(g, r): sorted(rule["verbs"]) for rule in one(objects, "ClusterRole")["rules"]
             for g in rule["apiGroups"] for r in rule["resources"]}
    assert rules == {
        ("resource.k8s.io", "resourceslices"): sorted(["get", "list", "watch", "create", "update", "delete"]),
        ("resource.k8s.io", "resourceclaims"): ["get"],
        ("", "nodes"): ["get"],
        ("admissionregistration.k8s.io", "validatingadmissionpolicies"): ["list"],  # the fence check (k134)
        ("", "events"): ["create"],  # the watchdog's verdicts
    }
    binding = one(objects, "ClusterRoleBinding")
    sa = one(objects, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": "gpu-system"}]
    assert pod_spec(objects)["serviceAccountName"] == sa["name"]


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_slice_policy_applies_to_this_releases_daemon_only(helm: Tool, chart: str) -> None:
    objects = render(helm, chart, release="rel", namespace="npu-system")
    objects = [o for o in objects if "dra.project-hami.io/fence" not in o["metadata"]["labels"]]  # test_fence.py
    policy = one(objects, "ValidatingAdmissionPolicy")
    sa = one(objects, "ServiceAccount")["metadata"]["name"]
    assert policy["spec"]["matchConditions"][0]["expression"] == f'request.userInfo.username == "system:serviceaccount:npu-system:{sa}"'
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert one(objects, "ValidatingAdmissionPolicyBinding")["spec"] == {
        "policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    own = render(helm, chart, values={"serviceAccount.create": False, "serviceAccount.name": "mine"}, namespace="n")
    assert "ServiceAccount" not in kinds(own)
    own = [o for o in own if "dra.project-hami.io/fence" not in o["metadata"]["labels"]]
    assert "system:serviceaccount:n:mine" in one(own, "ValidatingAdmissionPolicy")["spec"]["matchConditions"][0]["expression"]
    assert "ValidatingAdmissionPolicy" not in kinds(render(helm, chart, values={"sliceNodePolicy.enabled": False,
                                                                              "schedulerFence.enabled": False}))


# (values, what the error must say): every message names the value's path.
BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"daemon.preload": "ld"}, "at '/daemon/preload': value must be one of 'file', 'env'"),
    ({"daemon.metricsPort": 0}, "at '/daemon/metricsPort': minimum: got 0, want 1"),
    ({"daemon.grpcWorkers": 8}, "at '/daemon/grpcWorkers': minimum: got 8, want 32"),
    ({"daemon.logFormat": "xml"}, "at '/daemon/logFormat': value must be one of 'json', 'text'"),
    ({"kubeletPlugin.nodeSelecter": {"gpu": "on"}}, "at '/kubeletPlugin': additional properties 'nodeSelecter' not allowed"),
    ({"kubeletPlugin.nodeSelector": {"gpu": True}}, "at '/kubeletPlugin/nodeSelector/gpu': got boolean, want string"),
    ({"paths.cdiDir": "var/run/cdi"}, "at '/paths/cdiDir'"),
    ({"driver.name": "gpu.nvidia.com"}, "at '/driver/name': value must be 'hami-core-gpu.project-hami.io'"),
    ({"deviceClasses": with_extended_resource("hami-core-gpu", "gpu")}, "at '/deviceClasses/0/extendedResourceName'"),
    ({"deviceClasses": [{"name": "gpu"}]}, "at '/deviceClasses/0': missing property 'selector'"),
    ({"deviceClasses": [{"name": "gpu", "selector": "true", "parameters": {"computeMode": "strict"}}]},
     "at '/deviceClasses/0/parameters': missing properties 'apiVersion', 'kind'"),
    ({"hook.libraries": ["libvgpu.so"]}, "at '/hook/libraries/0'"),
    ({"daemon.extraArgs": ["-v"]}, "at '/daemon/extraArgs/0'"),
    ({"featureGates.required": ["DRAMagic"]}, "at '/featureGates/required/0'"),
    ({"daemon.settings.cdiMode": "legacy"}, "at '/daemon/settings/cdiMode': value must be one of 'toolkit', 'self-contained'"),
    ({"daemon.settings.health": False}, "at '/daemon/settings/health': value must be one of 'on', 'off'"),
    ({"daemon.settings.cdi_mode": "toolkit"}, "at '/daemon/settings': additional properties 'cdi_mode' not allowed"),
    ({"daemon.settings.clockElasticity": "0.4567"}, "at '/daemon/settings/clockElasticity': '0.4567' does not match"),
    ({"daemon.settings.clockElasticity": 1.5}, "at '/daemon/settings/clockElasticity': maximum: got 1.5, want 1"),
    ({"daemon.settings.clockElasticity": "lots"}, "at '/daemon/settings/clockElasticity': 'lots' does not match"),
    ({"image.pullPolicy": "Sometimes"}, "at '/image/pullPolicy'"),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES, ids=[m.split("'")[1] for _v, m in BAD_VALUES])
def test_bad_values_fail_with_the_schemas_message(helm: Tool, values: dict[str, Any], message: str) -> None:
    err = render_error(helm, "hami-core-gpu", values=values)
    assert "values don't meet the specifications of the schema" in err
    assert message in err, err


def test_a_service_account_that_is_not_created_must_be_named(helm: Tool) -> None:
    err = render_error(helm, "ascend", values={"serviceAccount.create": False})
    assert "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" in err


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_kubernetes_older_than_1_34_is_refused(helm: Tool, chart: str) -> None:
    err = render_error(helm, chart, extra=["--kube-version", "1.33.7"])
    assert "chart requires kubeVersion: >=1.34.0-0 which is incompatible with Kubernetes v1.33.7" in err


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_a_cluster_without_the_dra_api_is_refused(helm: Tool, chart: str) -> None:
    """A cluster's API list names kinds (v1/Pod); one without resource.k8s.io/v1 kinds is refused."""
    err = render_error(helm, chart, extra=["--api-versions", "v1/Pod"])
    assert "the cluster does not serve resource.k8s.io/v1/DeviceClass, which this chart needs" in err
    kinds_served = ["v1/Pod", "resource.k8s.io/v1/DeviceClass", "resource.k8s.io/v1/ResourceSlice",
                    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"]
    assert render(helm, chart, extra=["--api-versions", ",".join(kinds_served)])


def generator() -> Any:
    """helm/generate.py, which writes the charts' generated files."""
    spec = importlib.util.spec_from_file_location("helm_generate", HELM_DIR / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_generated_files_are_current() -> None:
    """Schemas and the webhook configurations: regenerate with `python helm/generate.py`."""
    for path, text in generator().generated().items():
        assert path.read_text() == text, f"{path} is stale: run python helm/generate.py"


@pytest.mark.parametrize("chart", [*DRIVER_CHARTS, "dra-webhook"])
def test_every_default_value_is_in_the_schema(chart: str) -> None:
    """additionalProperties: false everywhere, so the defaults themselves must validate."""
    import jsonschema

    schema = (HELM_DIR / chart / "values.schema.json").read_text()
    values = yaml.safe_load((HELM_DIR / chart / "values.yaml").read_text())
    jsonschema.validate({**values, "dra-common": {}}, yaml.safe_load(schema))


def test_the_library_chart_renders_nothing_by_itself(helm: Tool) -> None:
    proc = helm.run("template", "r", str(HELM_DIR / "dra-common"), check=False)
    assert proc.returncode != 0 and "library charts are not installable" in proc.stderr


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_driver_charts_use_the_library_and_copy_no_template(chart: str) -> None:
    link = HELM_DIR / chart / "charts" / "dra-common"
    assert link.is_symlink() and link.resolve() == (HELM_DIR / "dra-common").resolve()
    templates = sorted(p.name for p in (HELM_DIR / chart / "templates").iterdir())
    assert templates == ["NOTES.txt", "driver.yaml", "monitoring.yaml"]
    for p in (HELM_DIR / chart / "templates").iterdir():
        body = "\n".join(line for line in p.read_text().splitlines() if not line.lstrip().startswith("{{- /*"))
        assert body.strip().startswith('{{ include "dra-common.'), f"{p}: only an include of the library"



@pytest.mark.parametrize("chart", [*DRIVER_CHARTS, "dra-webhook"])
def test_a_packaged_chart_carries_the_library_and_renders_on_its_own(helm: Tool, chart: str, tmp_path: Any) -> None:
    """`helm package` resolves the charts/dra-common link: the archive works without the checkout."""
    import tarfile

    helm.run("package", str(HELM_DIR / chart), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob(f"{chart}-*.tgz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert f"{chart}/charts/dra-common/templates/_names.tpl" in names and f"{chart}/values.schema.json" in names
    auth = ["--set", "webhook.acceptUnauthenticatedCallers=true"] if chart == "dra-webhook" else []  # else refused
    proc = helm.run("template", "r", str(archive), "--kube-version", "1.34.4", *auth)
    assert "kind: ClusterRole" in proc.stdout
