"""The demo's `wait`: `dra._runtime.wait.until` with the demo's error and tolerated exceptions."""

from __future__ import annotations

import pytest

from dra.errors import UserError
from dra_dev.demo.console import wait


def test_wait_returns_the_first_truthy_answer_and_tolerates_what_it_is_told() -> None:
    answers = iter([KeyError("not yet"), None, [], ["slice"]])

    def probe() -> list[str] | None:
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got

    assert wait("the slice", probe, timeout=5, interval=0, tolerate=(KeyError,)) == ["slice"]


def test_wait_lets_other_exceptions_through() -> None:
    def probe() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        wait("the slice", probe, timeout=5, interval=0, tolerate=(KeyError,))


def test_wait_times_out_with_a_user_error_naming_what_it_waited_for() -> None:
    with pytest.raises(UserError, match=r"the demo timed out after 0.05 s waiting for the node's slices \(last: None\)"):
        wait("the node's slices", lambda: None, timeout=0.05, interval=0.01)
