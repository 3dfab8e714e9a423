"""The repository checkout the rig runs from (examples, charts, Dockerfile, protos)."""

from __future__ import annotations

from pathlib import Path

from dra.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


def path(*parts: str) -> Path:
    """`ROOT/parts`, or a UserError saying the rig needs a checkout when it is not there."""
    p = ROOT.joinpath(*parts)
    if not p.exists():
        raise UserError(f"{p} is missing: dra-hami-dev runs from a checkout of the repository "
                        "(git clone, then `make install`), not from an installed wheel")
    return p
