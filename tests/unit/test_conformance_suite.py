"""The conformance suite fails a driver that breaks its contract (it is not a rubber stamp)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BAD_DRIVERS = '''
import secrets
from dra.testing.conformance import DriverConformance
from drivers.example.driver import ExampleDriver
import dra


class Forgetful(ExampleDriver):
    """Its unprepare fails when what it undoes is already gone."""
    def __init__(self):
        super().__init__()
        self.held = set()

    def prepare(self, claim, devices):
        self.held.add(claim.uid)
        return super().prepare(claim, devices)

    def unprepare(self, claim, prepared):
        self.held.remove(claim.uid)  # KeyError the second time


class Moody(ExampleDriver):
    """Its prepare is not deterministic."""
    def prepare(self, claim, devices):
        return [dra.PreparedDevice(p.device, p.edits, state={"token": secrets.token_hex(4)})
                for p in super().prepare(claim, devices)]


class TestForgetful(DriverConformance):
    driver_class = Forgetful


class TestMoody(DriverConformance):
    driver_class = Moody
'''


def test_the_suite_fails_drivers_that_break_the_contract(tmp_path: Path) -> None:
    (tmp_path / "test_bad_drivers.py").write_text(BAD_DRIVERS)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "-k", "Forgetful and tolerates or Moody and deterministic", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert "2 failed" in proc.stdout, proc.stdout + proc.stderr
    assert "TestForgetful::test_unprepare_tolerates_resources_already_gone" in proc.stdout
    assert "TestMoody::test_prepare_is_idempotent_and_deterministic" in proc.stdout
