"""Property tests of the config parser through the Cython wrapper.

The C fuzzer (`fuzz_config`, 1e6 inputs under ASan/UBSan, in test_core_c.py) looks for crashes;
here hypothesis compares the C parser with an independent Python reference of the documented
grammar (exact rational arithmetic) and checks that every rejection is one line naming the value.
"""

from __future__ import annotations

import re
from fractions import Fraction
from types import ModuleType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MEM_MAX = 1 << 62
UNITS = {
    "": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
    "k": 1 << 10, "K": 1 << 10, "m": 1 << 20, "g": 1 << 30,
    "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
GRAMMAR = re.compile(r"\+?(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<unit>[A-Za-z]{1,2}))?")


def reference(text: str) -> int | None:
    """The documented quantity grammar, evaluated exactly; None = must be rejected."""
    m = GRAMMAR.fullmatch(text)
    if not m or not (m["int"] or m["frac"]):
        return None
    if m["unit"] is not None and m["unit"] not in UNITS:
        return None
    digits = (m["int"] or "") + (m["frac"] or "")
    value = Fraction(int(digits), 10 ** len(m["frac"] or ""))
    if m["exp"]:
        e = int(m["exp"][1:])
        if abs(e) > 999:
            return None
        value *= Fraction(10) ** e
    value *= UNITS[m["unit"] or ""]
    if value.denominator != 1 or not 0 < value <= MEM_MAX:
        return None
    return int(value)


quantities = st.builds(
    lambda sign, i, dot, f, tail: f"{sign}{i}{dot}{f}{tail}",
    st.sampled_from(["", "", "+", "-"]),
    st.from_regex(r"[0-9]{0,12}", fullmatch=True),
    st.sampled_from(["", "", "."]),
    st.from_regex(r"[0-9]{0,6}", fullmatch=True),
    st.one_of(st.sampled_from(sorted(UNITS)), st.from_regex(r"[eE][+-]?[0-9]{1,3}", fullmatch=True),
              st.sampled_from(["gb", "Gb", "mi", "KI", "x", " ", "i", "B", "e", "%"])),
)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=quantities)
def test_parse_memory_matches_reference(hookcore_ext: ModuleType, text: str) -> None:
    want = None if text.startswith("-") else reference(text)
    try:
        got: int | None = hookcore_ext.parse_memory(text, "CUDA_DEVICE_MEMORY_LIMIT_4")
    except hookcore_ext.HookConfigError as exc:
        msg = str(exc)
        assert msg.startswith('CUDA_DEVICE_MEMORY_LIMIT_4="') and "\n" not in msg
        got = None
    assert got == want, text


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=40))
def test_parse_any_text_is_total(hookcore_ext: ModuleType, text: str) -> None:
    """Arbitrary unicode: either a value in range or a one-line message; never a crash."""
    for parse, lo, hi in ((hookcore_ext.parse_memory, 1, MEM_MAX), (hookcore_ext.parse_sm, 1, 100)):
        try:
            value = parse(text)
        except hookcore_ext.HookConfigError as exc:
            assert "\n" not in str(exc) and str(exc)
        else:
            assert lo <= value <= hi


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=st.dictionaries(
    st.sampled_from(["CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_SHARED_CACHE"])
    | st.builds(lambda p, i: p + i,
                st.sampled_from(["CUDA_DEVICE_MEMORY_LIMIT_", "CUDA_DEVICE_SM_LIMIT_", "HOOKCORE_DEVICE_UUID_"]),
                st.sampled_from(["0", "1", "15", "16", "01", "", "a"])),
    st.one_of(quantities, st.sampled_from(["50", "100", "0", "/run/x", "GPU-1", "GPU-2", "rel/path"])),
    max_size=6))
def test_parse_config_total(hookcore_ext: ModuleType, env: dict[str, str]) -> None:
    try:
        cfg = hookcore_ext.parse_config(env)
    except hookcore_ext.HookConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and any(name in msg for name in env), msg
        return
    for d in cfg.devices:
        assert d.memory is None or 0 < d.memory <= MEM_MAX
        assert 1 <= d.cores <= 100
    assert cfg.ledger_path is None or cfg.ledger_path.startswith("/")
    if any(k.startswith(("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT")) for k in env):
        limited = any(d.memory is not None or d.cores < 100 for d in cfg.devices)
        assert (cfg.ledger_path is not None) or not limited
