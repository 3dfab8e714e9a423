"""The trust-boundary table (docs/trust-boundary.md) against the code (issue 25, item 2).

Every input a tenant controls has a row there: who reads it, with what privilege, and its
hostile test. These tests keep the table true: a claim's containers cannot gain a mount or an
environment variable, a writable mount cannot appear or a config type gain a field, without its
row; a row naming a hostile test that does not exist (renamed, deleted) fails too. The mounts and
variables are what a runtime gives the containers of real claims: every bundled driver on its
fake, each claim shape (plain, LD_PRELOAD, strict, MPS, high priority, self-contained, MIG), prepared through the
framework and read back from the CDI spec (`claim_shapes.py`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from claim_shapes import ClaimInputs, Shape, claim_inputs

from dra import Device
from dra._runtime import registry
from dra.config import encode_config
from drivers.ascend.driver import AscendDriver
from drivers.cambricon_mlu.driver import CambriconMluDriver
from drivers.example.driver import ExampleDriver
from drivers.hami_core_gpu.config import GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver
from drivers.hygon_dcu.driver import HygonDcuDriver

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "trust-boundary.md"
GPU = {"health": "off"}


def _one(devs: Sequence[Device]) -> list[Device]:
    return [d for d in devs if "-mig-" not in d.name][:1]


def _mig(devs: Sequence[Device]) -> list[Device]:
    return [d for d in devs if "-mig-" in d.name][:1]


SHAPES = [
    Shape("example", ExampleDriver),
    Shape("gpu", HamiCoreGpuDriver, "h200x2", GPU),
    Shape("gpu-ld-preload", HamiCoreGpuDriver, "h200x2", GPU, GpuConfig(preload="env")),
    Shape("gpu-strict", HamiCoreGpuDriver, "h200x2", GPU, GpuConfig(compute_mode="strict", full_load_clock_mhz=1500)),
    Shape("gpu-mps", HamiCoreGpuDriver, "h200x2", GPU, GpuConfig(sharing="mps"), _one),
    Shape("gpu-high", HamiCoreGpuDriver, "h200x2", GPU, GpuConfig(priority="high")),
    Shape("gpu-self-contained", HamiCoreGpuDriver, "a100-40gx4", {**GPU, "cdiMode": "self-contained"}),
    Shape("gpu-mig", HamiCoreGpuDriver, "h200x2-mig", {**GPU, "mig": "static"}, None, _mig),
    Shape("ascend", AscendDriver, "910b3x2", GPU),
    Shape("hygon-dcu", HygonDcuDriver, "k100-aix2", GPU),
    Shape("cambricon-mlu", CambriconMluDriver, "mlu370-x8x2", GPU),
    Shape("cambricon-mlu-whole", CambriconMluDriver, "mlu370-x8x2", {**GPU, "sharing": "whole"}),
]


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    mode: str
    tests: tuple[str, ...]


def rows(text: str) -> list[Row]:
    """The table rows: lines whose first cell is a backticked id."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\| `([^`]+)` \| ([^|]*) \|", line)
        if m:
            last = line.rstrip().rstrip("|").rsplit("|", 1)[-1]
            out.append(Row(m.group(1), m.group(2).strip(), tuple(re.findall(r"`(tests/[^`]+)`", last))))
    return out


def table() -> list[Row]:
    return rows(TABLE.read_text())


def listed(kind: str, name: str, table_rows: list[Row]) -> Row | None:
    """The row of `kind name` (a trailing ``*`` in an id matches any suffix; the longest id wins)."""
    found = [r for r in table_rows if r.id.startswith(kind + " ") and fnmatch.fnmatchcase(name, r.id[len(kind) + 1:])]
    return max(found, key=lambda r: len(r.id), default=None)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ClaimInputs]:
    return {s.name: claim_inputs(s, tmp_path_factory.mktemp(s.name)) for s in SHAPES}


def test_every_mount_is_listed_and_every_writable_mount_is_listed_rw(inputs: dict[str, ClaimInputs]) -> None:
    t = table()
    missing, wrong = [], []
    for shape, got in inputs.items():
        for m in got.mounts:
            row = listed("mount", m.container_path, t)
            writable = "ro" not in m.options
            if row is None:
                missing.append(f"{shape}: {m.container_path} ({'rw' if writable else 'ro'})")
            elif writable and row.mode != "rw":
                wrong.append(f"{shape}: {m.container_path} is writable ({','.join(m.options)}), the table says {row.mode}")
    assert not missing and not wrong, (
        "a claim's containers get mounts the trust-boundary table does not list as they are: add a row (with who"
        f" reads it, with what privilege, and its hostile test) to {TABLE.relative_to(ROOT)}: {missing + wrong}")


def test_every_writable_mount_is_listed_rw(inputs: dict[str, ClaimInputs]) -> None:
    """The same, for writable mounts alone (the one a tenant writes through): none beyond the rw rows."""
    rw = {r.id for r in table() if r.mode == "rw"}
    for shape, got in inputs.items():
        for path in got.writable():
            row = listed("mount", path, table())
            assert row is not None and row.id in rw, f"{shape}: writable mount {path} is not a rw row of the table"


def test_every_environment_variable_is_listed(inputs: dict[str, ClaimInputs]) -> None:
    t = table()
    missing = sorted({f"{name} ({shape})" for shape, got in inputs.items() for name in got.env
                      if listed("env", name, t) is None and not name.startswith("HOOKCORE_STUB_")})
    assert not missing, f"variables a claim's containers get without a row in {TABLE.relative_to(ROOT)}: {missing}"


def config_fields() -> dict[str, set[str]]:
    """Every driver's opaque config fields by kind, as a claim spells them (apiVersion, kind included)."""
    out: dict[str, set[str]] = {}
    for cls in registry.driver_classes().values():
        cfg = getattr(cls, "config_type", None)
        if cfg is not None:
            out[cfg.__name__] = set(encode_config(cls, cfg()))
    return out


def test_every_config_field_of_every_driver_is_listed_and_no_row_is_stale() -> None:
    t = table()
    fields = config_fields()
    assert {"GpuConfig", "NpuConfig", "DcuConfig", "MluConfig", "ExampleConfig"} <= set(fields)
    want = {f"config {kind}.{name}" for kind, names in fields.items() for name in names}
    have = {r.id for r in t if r.id.startswith("config ")}
    assert not want - have, f"config fields a claim can set without a row in {TABLE.relative_to(ROOT)}: {sorted(want - have)}"
    assert not have - want, f"rows for config fields no driver has (renamed or removed): {sorted(have - want)}"


def test_every_row_names_a_hostile_test_that_exists() -> None:
    bad = []
    t = table()
    assert len(t) > 40
    for r in t:
        if not r.tests:
            bad.append(f"{r.id}: names no test")
        for ref in r.tests:
            path, _, name = ref.partition("::")
            file = ROOT / path
            if not file.is_file():
                bad.append(f"{r.id}: {path} does not exist")
            elif name and not re.search(rf"^\s*def {re.escape(name)}\(", file.read_text(), re.M):
                bad.append(f"{r.id}: {path} has no test {name}")
    assert not bad, bad


def test_the_table_parser_sees_modes_and_wildcards() -> None:
    """The matcher itself: a wildcard row, the longest id winning, a missing row."""
    t = rows("| `mount /run/x/*` | rw | a | b | `tests/x.py` |\n| `mount /run/x/config` | ro | a | b | `tests/y.py` |\n")
    row = listed("mount", "/run/x/config", t)
    assert row is not None and (row.id, row.mode, row.tests) == ("mount /run/x/config", "ro", ("tests/y.py",))
    row = listed("mount", "/run/x/ledger", t)
    assert row is not None and row.mode == "rw"
    assert listed("mount", "/run/y", t) is None
