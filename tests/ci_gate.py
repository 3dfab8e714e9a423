"""The one rule for tests this machine cannot run (no root, no runtime-like runner, no node
parts): they skip with the reason here, and fail under CI=true, where they must run."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

CI = os.environ.get("CI") == "true"


def skip_or_fail(reason: str | None) -> None:
    """Nothing when `reason` is empty; else skip, or fail under CI=true."""
    if not reason:
        return
    if CI:
        pytest.fail(f"CI must run this test: {reason}", pytrace=False)
    pytest.skip(reason)


def gate(reason: str | None) -> Callable[[], None]:
    """For a module none of whose tests can run here: ``_gate = gate(why)`` at module level skips
    the module at once (before any fixture starts a cluster), or under CI=true gives it an
    autouse fixture that fails each test with the reason."""
    if reason and not CI:
        pytest.skip(reason, allow_module_level=True)

    @pytest.fixture(autouse=True)
    def _ci_gate() -> None:
        skip_or_fail(reason)

    return _ci_gate  # type: ignore[no-any-return]
