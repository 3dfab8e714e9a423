"""`dra.settings.parse`: a driver's --set keys read through its table (what a third-party driver uses)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import dra.settings


@dataclasses.dataclass(frozen=True)
class Knobs:
    root: Path = Path("/")
    mode: str = "a"
    poll: float = 5.0


FIELDS: dra.settings.Fields = {
    "root": ("root", dra.settings.absolute_path),
    "mode": ("mode", dra.settings.choice("a", "b")),
    "poll": ("poll", dra.settings.seconds),
}


def test_given_keys_are_parsed_and_the_rest_keep_their_defaults() -> None:
    assert dra.settings.parse(Knobs, {"mode": "b", "poll": "0.5"}, FIELDS, "knobs") == Knobs(mode="b", poll=0.5)
    assert dra.settings.parse(Knobs, {}, FIELDS, "knobs") == Knobs()


@pytest.mark.parametrize(("raw", "message"), [
    ({"Mode": "a"}, "unknown setting 'Mode' for knobs; known: mode, poll, root"),
    ({"mode": "c"}, "mode must be one of ['a', 'b'], not 'c'"),
    ({"root": "rel"}, "root must be an absolute path, not 'rel'"),
    ({"poll": "soon"}, "poll must be seconds in 0.01..300, not 'soon'"),
])
def test_an_unknown_key_or_a_bad_value_is_refused_naming_the_key(raw: dict[str, str], message: str) -> None:
    with pytest.raises(dra.settings.SettingsError) as got:
        dra.settings.parse(Knobs, raw, FIELDS, "knobs")
    assert str(got.value) == message
