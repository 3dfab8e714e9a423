"""The image the charts run: the Dockerfile's build steps are `make wheel` plus installing that
wheel; this builds the wheel with the same target, installs it apart from the checkout and runs
the charts' commands from it, and checks the Dockerfile still runs those steps on any base.
`make image` builds the Dockerfile itself (buildah, a Debian base); tests/helm_node runs it as
the charts' pods on a real node.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from chart_helpers import HELM_DIR, ROOT

from dra._runtime import registry

DOCKERFILE = ROOT / "Dockerfile"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(["make", "-C", str(ROOT), "wheel", f"PY={sys.executable}", f"DIST={dist}"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = dist.glob("dra_hami-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed on its own (its dependencies come from this environment)."""
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return target


def run_installed(installed: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(installed)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def dockerfile_runs() -> list[str]:
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    # The commands, without RUN's own options (--mount=...).
    return [re.sub(r"^(--\S+\s+)+", "", line[4:].strip()) for line in text.splitlines() if line.startswith("RUN ")]


def test_the_dockerfile_builds_with_make_wheel_and_the_projects_build_requirements() -> None:
    runs = dockerfile_runs()
    assert any(r.startswith("make wheel ") for r in runs), runs
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    pip_build = next(r for r in runs if "pip install" in r and "Cython" in r)
    assert sorted(re.findall(r'"([^"]+)"', pip_build)) == sorted(requires), "keep the Dockerfile's build requirements = pyproject's"
    assert any("--no-index" in r and "dra-hami" in r for r in runs), "the runtime stage installs only the built wheels"
    text = DOCKERFILE.read_text()
    assert "PYTHONDONTWRITEBYTECODE=1" in text, "the charts run with readOnlyRootFilesystem"
    # Users build it unchanged from a registry base; `make image` passes a Debian one.
    assert re.search(r"^ARG BASE=python:3\.11-slim$", text, re.M) and text.count("FROM ${BASE}") == 3, \
        "the three stages (build, install, the image) start from the BASE build argument (python:3.11-slim by default)"
    # The installed venv reaches the image by COPY --from, which buildah caches by content; a RUN
    # with a bind mount from another stage is cached by its command line and kept stale wheels.
    assert "COPY --from=install /opt/dra /opt/dra" in text and "type=bind,from=build" not in text
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".venv", "hookcore/build", "build", "dist"} <= ignored, "host builds must not reach the image"


def test_the_wheel_carries_the_hook_libraries_the_stubs_and_every_charts_entry_point(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    for member in ("hookcore/build/libvgpu.so", "hookcore/build/stub/libcuda.so.1", "hookcore/build/stub/libnvidia-ml.so.1",
                   "dra/webhook/vendors.yaml", "dra/_runtime/daemon.py", "dra/_runtime/hookdir_cli.py"):
        assert member in names, f"{member} is not in the wheel"
    assert "dra = dra.cli:main" in entry_points
    for chart in ("hami-core-gpu", "ascend", "hygon-dcu", "cambricon-mlu"):
        entry = yaml.safe_load((HELM_DIR / chart / "values.yaml").read_text())["driver"]["entryPoint"]
        if (ROOT / "drivers" / entry.replace("-", "_")).is_dir():
            assert re.search(rf"^{re.escape(entry)} = ", entry_points, re.M), f"the wheel does not register {entry}"


def test_the_charts_commands_run_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    """What the pods run: `dra hookdir install` (the init container) installs the wheel's own
    library; `dra run` and `dra webhook run` start from it (their --help here)."""
    where = run_installed(installed, "-c", "import dra, hookcore; print(dra.__file__); print(dra.hook_library('vgpu'))",
                          cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    module, library = where.stdout.split()
    assert module.startswith(str(installed)) and library.startswith(str(installed)), "imported the checkout, not the wheel"
    hooks = tmp_path / "hooks"
    proc = run_installed(installed, "-m", "dra.cli", "hookdir", "install", f"--hook-dir={hooks}", "vgpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lib = hooks / "current" / "libvgpu.so"
    assert hashlib.sha256(lib.read_bytes()).hexdigest() == hashlib.sha256(Path(library).read_bytes()).hexdigest()
    for argv in (["-m", "dra.cli", "run", "--help"], ["-m", "dra.cli", "webhook", "run", "--help"]):
        proc = run_installed(installed, *argv, cwd=tmp_path)
        assert proc.returncode == 0 and "--" in proc.stdout, proc.stderr
    drivers = run_installed(installed, "-m", "dra.cli", "drivers", cwd=tmp_path)
    assert "hami-core-gpu" in drivers.stdout, drivers.stdout + drivers.stderr


# The runtime distribution's own dependencies and the NVIDIA extra; anything else in Requires-Dist
# (the rig's cryptography or tomli-w, a test tool) would reach every node's image.
RUNTIME_REQUIRES = {"grpcio", "protobuf", "kubernetes", "typer", "rich", "prometheus-client", "pyyaml"}
RIG_ONLY = ("dra_dev/", "dra/cluster/", "dra/node/", "dra/demo", "dra/webhook_local", "dra/gen_proto", "dra/checkout")
RUNTIME_COMMANDS = {"run", "hookdir", "hook", "webhook", "drivers", "top"}  # top: an admin's view, runs anywhere
RIG_COMMANDS = {"cluster", "node", "demo"}


def requires_dist(wheel: Path) -> list[tuple[str, str]]:
    """(distribution name, environment marker) for each Requires-Dist of the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    found = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            spec, _, marker = line.removeprefix("Requires-Dist:").partition(";")
            name = re.split(r"[\s<>=!~\[(]", spec.strip(), maxsplit=1)[0]
            found.append((name.lower().replace("_", "-"), marker.strip()))
    return found


def test_installing_the_runtime_wheel_pulls_no_dependency_of_the_rig(wheel: Path) -> None:
    requires = requires_dist(wheel)
    plain = {name for name, marker in requires if not marker}
    assert plain == RUNTIME_REQUIRES, f"the runtime's unconditional requirements changed: {sorted(plain)}"
    nvidia = {name for name, marker in requires if marker == 'extra == "nvidia"'}
    assert nvidia == {"nvidia-ml-py"}, requires
    dev_tools = {name for name, marker in requires if marker == 'extra == "dev"'}
    assert dev_tools and not dev_tools & {"cryptography", "tomli-w", "dra-hami-dev"}, dev_tools
    # Only the dev extra (test tools, never installed in the image) and the vendor extra have markers.
    assert {marker for _, marker in requires} == {"", 'extra == "nvidia"', 'extra == "dev"'}, requires
    for name in ("cryptography", "tomli-w", "nvidia-ml-py", "dra-hami-dev"):
        assert name not in plain, f"{name} would be installed on every node"


def test_the_runtime_wheel_holds_no_module_of_the_rig(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    rig = [n for n in names if n.startswith(RIG_ONLY)]
    assert not rig, f"the dev rig's modules are in the runtime wheel: {rig[:10]}"
    assert any(n.startswith("dra/_runtime/") for n in names) and any(n.startswith("dra/webhook/") for n in names)
    assert f"[{registry.COMMANDS}]" not in entry_points, "the runtime registers no rig command; dra-hami-dev does"


def test_the_dev_distribution_provides_the_rig_commands() -> None:
    project = tomllib.loads((ROOT / "dev" / "pyproject.toml").read_text())["project"]
    commands = project["entry-points"][registry.COMMANDS]
    assert set(commands) == RIG_COMMANDS | {"webhook.up", "webhook.down"}, commands
    assert all(target.startswith("dra_dev.") for target in commands.values()), commands
    rig_libraries = {re.split(r"[\s<>=!~\[]", d, maxsplit=1)[0] for d in project["dependencies"]}
    assert {"cryptography", "tomli-w"} <= rig_libraries, "the rig's own libraries belong to dra-hami-dev"
    runtime = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert registry.COMMANDS not in runtime.get("entry-points", {}), "rig commands belong to dra-hami-dev"
    assert not [d for d in runtime["dependencies"] if d.startswith(("cryptography", "tomli-w", "tomli_w"))]


def wheel_only_path(installed: Path, tmp_path: Path) -> Path:
    """A site-packages view with this environment's third-party libraries and not its dra-hami
    or dra-hami-dev (installed editable here): what the image's venv holds, as far as the `dra`
    command can tell. Run with `python -S` (no .pth files, so no editable finders)."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    view = tmp_path / "site"
    view.mkdir()
    for entry in site.iterdir():
        lowered = entry.name.lower()
        if lowered.startswith(("dra_hami", "dra-hami", "__editable__", "dra_dev", "dra", "drivers", "hookcore")) \
                or lowered.endswith(".pth"):
            continue
        (view / entry.name).symlink_to(entry)
    return view


def run_wheel_only(installed: Path, view: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(view)]), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-S", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def listed_commands(help_text: str) -> set[str]:
    """The sub-command names of a Typer `--help` (its Commands panel: `│ name  help... │`)."""
    panel = help_text.split("Commands", 1)[1] if "Commands" in help_text else ""
    return {m.group(1) for m in re.finditer(r"^[│|]\s+([a-z][\w-]*)\s{2,}", panel, re.M)}


def test_the_images_dra_offers_only_the_runtime_commands(installed: Path, tmp_path: Path) -> None:
    """The image installs dra-hami alone: its `dra` has no cluster, node or demo, and its
    `dra webhook` no up or down (dra-hami-dev adds those where the rig is installed)."""
    view = wheel_only_path(installed, tmp_path)
    where = run_wheel_only(installed, view, "-c", "import dra, importlib.metadata as m; print(dra.__file__); "
                           "print(sorted(d.metadata['Name'] for d in m.distributions() if 'dra' in d.metadata['Name']))",
                           cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(installed)) and "dra-hami-dev" not in where.stdout, where.stdout
    top = run_wheel_only(installed, view, "-m", "dra.cli", "--help", cwd=tmp_path)
    assert top.returncode == 0, top.stderr
    assert listed_commands(top.stdout) == RUNTIME_COMMANDS, top.stdout
    webhook = run_wheel_only(installed, view, "-m", "dra.cli", "webhook", "--help", cwd=tmp_path)
    assert webhook.returncode == 0, webhook.stderr
    assert "run" in listed_commands(webhook.stdout) and not {"up", "down"} & listed_commands(webhook.stdout), webhook.stdout
    rig = run_wheel_only(installed, view, "-m", "dra.cli", "cluster", "--help", cwd=tmp_path)
    assert rig.returncode != 0, rig.stdout


def test_the_checkout_with_the_rig_offers_the_rig_commands(tmp_path: Path) -> None:
    """The counterpart of the test above, so that its parsing of --help can tell the difference:
    with dra-hami-dev installed (make install), `dra` lists cluster, node and demo too."""
    env = {**os.environ, "COLUMNS": "200"}
    top = subprocess.run([sys.executable, "-m", "dra.cli", "--help"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert top.returncode == 0, top.stderr
    assert listed_commands(top.stdout) == RUNTIME_COMMANDS | RIG_COMMANDS, top.stdout
    webhook = subprocess.run([sys.executable, "-m", "dra.cli", "webhook", "--help"], capture_output=True, text=True, env=env,
                             cwd=ROOT, timeout=120)
    assert {"run", "up", "down"} <= listed_commands(webhook.stdout), webhook.stdout


def test_the_dockerfile_installs_the_runtime_with_its_nvidia_extra_and_nothing_of_the_rig() -> None:
    runs = dockerfile_runs()
    build = next(r for r in runs if "make wheel" in r)
    assert '"$(echo /wheels/dra_hami-*.whl)[nvidia]"' in build, "the build stage fetches the NVIDIA extra's wheels"
    final = next(r for r in runs if "--no-index" in r)
    assert "'dra-hami[nvidia]'" in final and "dev" not in final.replace("/dev/", ""), final
    assert not any("./dev" in r or "dra-hami-dev" in r or "dra_dev" in r for r in runs), runs
