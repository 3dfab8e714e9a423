"""Import contracts and lint hold for the whole tree (the rules in pyproject.toml), and each
contract does catch the violation it exists for."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on the tree at `root`: its dra, drivers, hookcore (the working directory) and
    its dev/dra_dev (first on PYTHONPATH, ahead of the installed dev rig)."""
    if not LINT_IMPORTS.exists():
        pytest.fail("import-linter is a dev dependency: pip install -e '.[dev]' (or make install)")
    path = os.pathsep.join([str(root), str(root / "dev"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": path}  # one line per contract
    return subprocess.run([str(LINT_IMPORTS)], cwd=root, capture_output=True, text=True, env=env)


def test_import_contracts_hold() -> None:
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_ruff_is_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("path", "line", "contract"), [
    ("drivers/example/driver.py", "from dra._runtime.prepare import ClaimPreparer", "import only the public face"),
    ("drivers/example/driver.py", "import dra._runtime.hookdir", "import only the public face"),
    ("drivers/example/driver.py", "import grpc", "neither gRPC nor the Kubernetes API"),
    ("dra/_runtime/prepare.py", "import kubernetes", "imported in one runtime module"),
    ("dra/_runtime/cdi.py", "import dra._runtime.prepare", "Layers of the framework"),
    ("dra/driver.py", "import dra._runtime.kubelet", "Layers of the framework"),
    ("dra/_runtime/checkpoint.py", "import drivers.example.driver", "never names a vendor driver"),
    ("drivers/example/driver.py", "from dra.testing.daemon import DaemonProcess", "import only the public face"),
    ("dra/_runtime/daemon.py", "import dra_dev.checkout", "The runtime never imports the dev rig"),
    ("dra/cli.py", "from dra_dev.node import cli", "The runtime never imports the dev rig"),
    ("dra/webhook/__init__.py", "import cryptography", "The runtime never imports the dev rig"),
    ("drivers/example/driver.py", "import tomli_w", "The runtime never imports the dev rig"),
    ("hookcore/__init__.py", "import dra_dev", "The hook library's Python side stands alone"),
    ("dev/dra_dev/checkout.py", "import dra_dev.cluster", "Layers of the dev rig"),
    ("dev/dra_dev/cluster/__init__.py", "import dra_dev.node", "Layers of the dev rig"),
    ("dev/dra_dev/node/__init__.py", "import dra_dev.demo.console", "Layers of the dev rig"),
])
def test_each_contract_catches_its_violation(tmp_path: Path, path: str, line: str, contract: str) -> None:
    for part in ("dra", "drivers", "hookcore", "dev"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("build", "*.so", "*.c", "*.o", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / path
    target.write_text(target.read_text() + f"\n{line}  # injected by the test\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0, proc.stdout
    broken = [ln for ln in proc.stdout.splitlines() if " BROKEN" in ln]
    assert any(contract in ln for ln in broken), proc.stdout


def test_the_copy_is_what_is_analysed(tmp_path: Path) -> None:
    """The violation tests above mean something only if lint-imports reads the copies, not the
    installed checkout: a module that exists only in the copy of each tree must be found."""
    for part in ("dra", "drivers", "hookcore", "dev"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("build", "*.so", "*.c", "*.o", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "dev" / "dra_dev" / "only_in_the_copy.py").write_text("import dra_dev.demo.console\n")
    (tmp_path / "dev" / "dra_dev" / "checkout.py").write_text(
        (tmp_path / "dev" / "dra_dev" / "checkout.py").read_text() + "\nimport dra_dev.only_in_the_copy  # injected\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0 and any("Layers of the dev rig" in ln and " BROKEN" in ln for ln in proc.stdout.splitlines()), \
        proc.stdout + proc.stderr


def _modules(package_dir: Path) -> list[str]:
    """Every module of the package at `package_dir` (its .py files), as dotted names."""
    names = []
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def _layered(pyproject: Path) -> set[str]:
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    return {
        f"{container}.{name.strip()}" if container else name.strip()
        for c in contracts
        if c["type"] == "layers"
        for container in c.get("containers", [""])  # a contract with containers names its layers relative to them
        for layer in c["layers"]
        for name in layer.split("|")
    }


# The distributions' top packages and the runtime's private namespace hold the stacks; a layers
# contract cannot name a package above its own layers.
CONTAINERS = {"dra", "dra._runtime", "dra_dev", "dra_dev.demo"}


def outside_layers(root: Path) -> tuple[list[str], list[str]]:
    """(modules of root's dra and dev/dra_dev that no layer names, itself or through an ancestor
    package; names in the layers that are no module)."""
    layered = _layered(root / "pyproject.toml")
    modules = _modules(root / "dra") + _modules(root / "dev" / "dra_dev")

    def covered(module: str) -> bool:
        parts = module.split(".")
        return any(".".join(parts[:i]) in layered for i in range(1, len(parts) + 1))

    return [m for m in modules if m not in CONTAINERS and not covered(m)], sorted(n for n in layered if n not in modules)


def test_every_module_of_dra_and_dra_dev_sits_in_a_layer() -> None:
    """A new module outside every layer would escape the layers contracts unseen."""
    modules = _modules(ROOT / "dra") + _modules(ROOT / "dev" / "dra_dev")
    assert len(modules) > 50 and "dra._runtime.wait" in modules and "dra_dev.demo.scenario" in modules
    outside, stale = outside_layers(ROOT)
    assert not outside, f"put these modules in a layer of pyproject.toml's layers contracts: {outside}"
    assert not stale, f"layers name modules that do not exist: {stale}"
    containers = sorted(CONTAINERS & _layered(ROOT / "pyproject.toml"))
    assert not containers, f"{containers} now sit in a layer: drop them from CONTAINERS"


def test_the_layer_check_sees_a_stray_module_and_a_stale_name(tmp_path: Path) -> None:
    for part in ("dra", "dev/dra_dev"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("build", "*.so", "*.c", "*.o"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "dra" / "_runtime" / "stray.py").write_text("")
    (tmp_path / "dev" / "dra_dev" / "loose").mkdir()
    (tmp_path / "dev" / "dra_dev" / "loose" / "__init__.py").write_text("")
    (tmp_path / "dra" / "_runtime" / "wait.py").unlink()
    outside, stale = outside_layers(tmp_path)
    assert outside == ["dra._runtime.stray", "dra_dev.loose"] and stale == ["dra._runtime.wait"]
