"""The one gate for tests this machine cannot run: skip here, fail under CI=true."""

from __future__ import annotations

import ci_gate
import pytest


def test_a_reason_skips_here_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ci_gate, "CI", False)
    with pytest.raises(pytest.skip.Exception, match="no runc"):
        ci_gate.skip_or_fail("no runc")
    monkeypatch.setattr(ci_gate, "CI", True)
    with pytest.raises(pytest.fail.Exception, match="CI must run this test: no runc"):
        ci_gate.skip_or_fail("no runc")


@pytest.mark.parametrize("reason", ["", None])
def test_no_reason_lets_the_test_run(monkeypatch: pytest.MonkeyPatch, reason: str | None) -> None:
    monkeypatch.setattr(ci_gate, "CI", True)
    ci_gate.skip_or_fail(reason)  # returns: nothing to skip or fail


def test_a_module_gate_skips_the_module_at_import_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ci_gate, "CI", False)
    with pytest.raises(pytest.skip.Exception, match="not root"):
        ci_gate.gate("not root")
