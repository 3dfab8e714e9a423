"""HAMi's device-choosing annotations as DRA CEL selectors, with HAMi's matching semantics.

HAMi (pkg/device: `CheckUUID`, nvidia `checkGPUtype`), as read from its source:
- UUID lists (`use-gpuuuid`, `nouse-gpuuuid`, Ascend `use-<model>-uuid`, `no-use-<model>-uuid`)
  are comma separated, each entry trimmed, compared exactly. When both are given both apply:
  a device must be in the use list and not in the no-use list.
- Type lists (`use-gputype`, `nouse-gputype`) are comma separated and match when the device
  type, upper-cased, *contains* the entry, upper-cased. The device type is
  ``<typePrefix><type attribute>`` (HAMi's NVIDIA type is "NVIDIA-" + the NVML product name),
  so ``A100``, ``a100-sxm4`` and ``NVIDIA-NVIDIA A100`` all select an "NVIDIA A100-SXM4-80GB".
  A device must contain one use entry (when given) and no no-use entry.

Empty entries are skipped and an empty list asks for nothing, as HAMi does since its #2045 (before
it, an empty entry was a substring of every type: a trailing comma in `use-gputype` matched every
GPU and one in `nouse-gputype` excluded every GPU). The webhook says so in a warning.
"""

from __future__ import annotations

import json
import re

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def cel_string(text: str) -> str:
    """A CEL string literal for `text` (JSON's escapes are CEL's; non-ASCII stays UTF-8)."""
    return json.dumps(text, ensure_ascii=False)


def attribute(driver: str, name: str) -> str:
    """CEL for a device attribute: unqualified names live in the driver's domain."""
    domain, _, ident = name.rpartition("/")
    domain = domain or driver
    base = f"device.attributes[{cel_string(domain)}]"
    return f"{base}.{ident}" if _IDENT.match(ident) else f"{base}[{cel_string(ident)}]"


def capacity(driver: str, name: str) -> str:
    domain, _, ident = name.rpartition("/")
    base = f"device.capacity[{cel_string(domain or driver)}]"
    return f"{base}.{ident}" if _IDENT.match(ident) else f"{base}[{cel_string(ident)}]"


def split_list(annotation: str, value: str) -> tuple[str, ...]:
    """HAMi's comma-separated list, entries trimmed, empty ones skipped (see module doc)."""
    return tuple(e for e in (x.strip() for x in value.split(",")) if e)


def list_warning(annotation: str, value: str) -> str | None:
    """What to tell a user whose list has empty entries (HAMi skips them too)."""
    if not split_list(annotation, value):
        return f"annotation {annotation} is empty, which asks for nothing (as in HAMi); remove it"
    if any(not x.strip() for x in value.split(",")):
        return f"annotation {annotation} has an empty entry (a stray comma), skipped as HAMi skips it"
    return None


def uuid_selectors(attr: str, use: tuple[str, ...], no_use: tuple[str, ...]) -> list[str]:
    out = []
    if use:
        out.append(f"{attr} in [{', '.join(cel_string(u) for u in use)}]")
    if no_use:
        out.append(f"!({attr} in [{', '.join(cel_string(u) for u in no_use)}])")
    return out


def upper_ascii(text: str) -> str:
    """Upper-case ASCII letters only, exactly as CEL's ``upperAscii()`` does on the device side."""
    return "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in text)


def type_selectors(attr: str, prefix: str, use: tuple[str, ...], no_use: tuple[str, ...]) -> list[str]:
    """Case-insensitive substring matches on ``prefix + attr`` (both sides upper-cased)."""
    subject = f"({cel_string(prefix)} + {attr}).upperAscii()" if prefix else f"{attr}.upperAscii()"
    out = []
    if use:
        out.append(" || ".join(f"{subject}.contains({cel_string(upper_ascii(t))})" for t in use))
    if no_use:
        out.append("!(" + " || ".join(f"{subject}.contains({cel_string(upper_ascii(t))})" for t in no_use) + ")")
    return out


def equals_selector(attr: str, value: str) -> str:
    return f"{attr} == {cel_string(value)}"


def memory_equals_selector(cap: str, quantity: str) -> str:
    return f"{cap}.compareTo(quantity({cel_string(quantity)})) == 0"


def at_least_selector(cap: str, quantity: str) -> str:
    return f"{cap}.compareTo(quantity({cel_string(quantity)})) >= 0"
