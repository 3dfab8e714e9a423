"""The admin's word wins: which opaque-config fields loosen enforcement, and the check.

A claim's author may be a hostile tenant, so a field that holds a claim less strictly (no compute
limit, ``LD_PRELOAD`` instead of ``/etc/ld.so.preload``, a weaker compute mode) is honoured from
a DeviceClass's config (the admin's), and from a claim's own config only where the admin allowed
it (``dra run --allow-claim-loosening``, the webhook's flag of the same name). Drivers do not
write this rule: their config type marks each such field with `strength` (its values from
weakest to strongest) and prepare and the webhook both call `loosened` with the class's config
as the baseline.

    compute_limit: bool = dataclasses.field(default=True, metadata=dra.strength(False, True))

Some values act beyond the claim, on what other tenants share (a watchdog that taints a device):
`strength`'s ``admin_only`` names them, and a claim's own config may choose one only where its
baseline (the class's config, else what unset means on the daemon) already has it.

The same order merges the configs of a claim's requests (`strictest`): a device that several
requests land on is held by the strictest value of each field, a claim-wide field (``claim_wide``)
by the strongest across the claim, so one request's config never loosens another's device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

__all__ = ["SETTING", "Conflict", "Loosening", "describe", "loosened", "marked_fields", "strength", "strictest"]

SETTING = "allowClaimLoosening"
"""The name the admin's permission goes by (chart value ``daemon.allowClaimLoosening`` and
``webhook.allowClaimLoosening``, flag ``--allow-claim-loosening``)."""
FIX = (f"a claim may not loosen its own enforcement: use a DeviceClass whose config sets it (the admin's), or ask the"
       f" admin to allow it ({SETTING}: chart values daemon.{SETTING} and webhook.{SETTING})")

_KEY = "dra.strength"


@dataclasses.dataclass(frozen=True)
class _Strength:
    levels: tuple[tuple[Any, ...], ...]
    weaker: Literal["higher", "lower"] | None
    when: Callable[[Any], bool] | None
    claim_wide: bool = False
    admin_only: tuple[Any, ...] = ()


def strength(*levels: Any, weaker: Literal["higher", "lower"] | None = None,
             when: Callable[[Any], bool] | None = None, claim_wide: bool = False,
             admin_only: Sequence[Any] = ()) -> dict[str, Any]:
    """Field metadata marking a field that sets how strictly a claim is held.

    `levels`: its values from weakest to strongest (a tuple groups equal ones, ``None`` may be
    placed where "unset" belongs); or, for a number, `weaker` says which direction loosens
    (then a claim setting or unsetting a value the class did not is a loosening: what unset
    means is the daemon's business). `when(config)`: the field matters only then (e.g. a clock
    that only a strict mode reads); None stands for the defaults.

    `claim_wide`: the field holds the whole claim, not one device (how its containers load the
    hook), so merging takes the strongest across all its requests. `admin_only`: values that act
    on what other tenants share (a device taint): however strong, a claim's own config may
    choose one only where its baseline already has it (a DeviceClass's config or the daemon)."""
    if bool(levels) == (weaker is not None):
        raise ValueError("strength() takes either levels or weaker=")
    grouped = tuple(lv if isinstance(lv, tuple) else (lv,) for lv in levels)
    return {_KEY: _Strength(grouped, weaker, when, claim_wide, tuple(admin_only))}


@dataclasses.dataclass(frozen=True)
class Loosening:
    """One field a claim's config sets weaker than its baseline (the class's config or the default)."""

    field: str  # as spelled in JSON
    value: Any
    baseline: Any
    from_class: bool  # the baseline is a DeviceClass's config (else the field's default)
    admin_only: bool = False  # not weaker, but a value only the admin may choose (`strength`)

    def describe(self) -> str:
        where = "the DeviceClass's" if self.from_class else "the default"
        if self.admin_only:
            return (f"{self.field}={_show(self.value)} acts on what other tenants share, so only a DeviceClass's"
                    f" config or the daemon may choose it, not the claim's own ({where}: {_show(self.baseline)})")
        return f"{self.field}={_show(self.value)} is weaker than {where} {_show(self.baseline)}"


def _show(v: Any) -> str:
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _rank(s: _Strength, v: Any) -> int:
    for i, group in enumerate(s.levels):
        if any(v == g and type(v) is type(g) for g in group):
            return i
    return -1  # a value the levels do not know counts as weakest


def _is_looser(s: _Strength, value: Any, base: Any) -> bool:
    if s.weaker is None:
        return _rank(s, value) < _rank(s, base)
    if value == base:
        return False
    if value is None or base is None:
        return True
    return bool(value > base) if s.weaker == "higher" else bool(value < base)


def _json_name(f: dataclasses.Field[Any]) -> str:
    head, *rest = f.name.split("_")
    return str(f.metadata.get("json", head + "".join(p[:1].upper() + p[1:] for p in rest)))


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def marked_fields(config_type: type) -> list[str]:
    """The JSON names of the fields `config_type` marks with `strength` (for docs and tests)."""
    return [_json_name(f) for f in dataclasses.fields(config_type) if _KEY in f.metadata]


def loosened(config: Any, baseline: Any | None, unset: Mapping[str, Any] | None = None) -> list[Loosening]:
    """The marked fields of `config` (a claim's decoded config) that are weaker than in
    `baseline` (the DeviceClass's decoded config for the same request, or None: the defaults).
    `unset`: what an unset field means here, by JSON name (the daemon's ``--preload``)."""
    out = []
    unset = unset or {}
    for f in dataclasses.fields(config):
        s: _Strength | None = f.metadata.get(_KEY)
        if s is None:
            continue
        if s.when is not None and not s.when(baseline):
            continue
        name = _json_name(f)
        base = getattr(baseline, f.name) if baseline is not None else _default(f)
        value = getattr(config, f.name)
        if name in unset:
            base = unset[name] if base is None else base
            value = unset[name] if value is None else value
        if _is_looser(s, value, base):
            out.append(Loosening(name, value, base, baseline is not None))
        elif getattr(config, f.name) in s.admin_only and value != base:  # the claim's own choice, not unset
            out.append(Loosening(name, value, base, baseline is not None, admin_only=True))
    return out


def describe(found: Sequence[Loosening]) -> str:
    """One sentence for an error: the fields and the fix."""
    return f"{'; '.join(x.describe() for x in found)}: {FIX}"


class Conflict(ValueError):
    """Configs of one claim that have no strictest value for a field (`strictest`)."""

    def __init__(self, field: str, values: Sequence[tuple[str, Any]]) -> None:
        self.field, self.values = field, tuple(values)
        shown = ", ".join(f"{label}: {_show(v)}" for label, v in self.values)
        super().__init__(f"{field} has no strictest value among {shown}")


T = TypeVar("T")


def _strictest_value(f: dataclasses.Field[Any], s: _Strength | None, labelled: Sequence[tuple[str, Any]]) -> Any:
    values = [(label, getattr(c, f.name)) for label, c in labelled if s is None or s.when is None or s.when(c)]
    if not values:
        return _default(f)
    distinct = {repr(v) for _, v in values}
    if len(distinct) == 1:
        return values[0][1]
    if s is None:  # a field that says nothing about strength: the requests must agree
        raise Conflict(_json_name(f), values)
    if s.weaker is None:
        return max((v for _, v in values), key=lambda v: _rank(s, v))  # the first of the strongest
    if any(v is None for _, v in values):  # unset is the daemon's value: no order against a set one
        raise Conflict(_json_name(f), values)
    set_values = [v for _, v in values]
    return min(set_values) if s.weaker == "higher" else max(set_values)


def strictest(labelled: Sequence[tuple[str, T]], scope: Literal["device", "claim"] | None = None) -> dict[str, Any]:
    """The strictest value of each field over `labelled` (label, config) pairs of one config
    type, by Python field name: a marked field's strongest level, or for a number the one that
    holds tightest (`weaker`); `when` leaves out the configs for which the field does not
    matter. `scope` "claim": only the claim-wide fields (and unmarked ones); "device": only the
    others; None: all. Raises `Conflict` for a field with no strictest value: an unmarked field
    the configs disagree on, or a number that some set and others leave unset (unset means the
    daemon's value, which this cannot compare)."""
    if not labelled:
        raise ValueError("strictest() of no configs")
    out: dict[str, Any] = {}
    for f in dataclasses.fields(labelled[0][1]):  # type: ignore[arg-type]
        s: _Strength | None = f.metadata.get(_KEY)
        wide = s is None or s.claim_wide
        if scope is None or (scope == "claim") == wide:
            out[f.name] = _strictest_value(f, s, labelled)
    return out
