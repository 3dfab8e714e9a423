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
    assert re.search(r"^ARG BASE=python:3\.11-slim$", text, re.M) and text.count("FROM ${BASE}") == 2, \
        "both stages start from the BASE build argument (python:3.11-slim by default)"
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
    for chart in ("hami-core-gpu", "ascend"):
        entry = yaml.safe_load((HELM_DIR / chart / "values.yaml").read_text())["driver"]["entryPoint"]
        if (ROOT / "drivers" / entry.replace("-", "_")).is_dir():
            assert re.search(rf"^{re.escape(entry)} = ", entry_points, re.M), f"the wheel does not register {entry}"


def test_the_charts_commands_run_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    """What the pods run: `dra hookdir install` (the init container) installs the wheel's own
    library; `python3 -m dra._runtime.daemon` and `dra webhook run` start from it (their --help here)."""
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
    for argv in (["-m", "dra._runtime.daemon", "--help"], ["-m", "dra.cli", "webhook", "run", "--help"]):
        proc = run_installed(installed, *argv, cwd=tmp_path)
        assert proc.returncode == 0 and "--" in proc.stdout, proc.stderr
    drivers = run_installed(installed, "-m", "dra.cli", "drivers", cwd=tmp_path)
    assert "hami-core-gpu" in drivers.stdout, drivers.stdout + drivers.stderr
