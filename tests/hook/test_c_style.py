"""Rules for hookcore's C sources that a reviewer would otherwise have to remember.

- One atomics style: every atomic operation goes through core/atomic.h, whose names carry the
  memory order (hk_atomic_load_acquire, ...). The bare C11 forms, GCC's __atomic/__sync builtins,
  memory_order_* constants and atomic_flag appear nowhere else.
- core/ and preload/ are vendor-neutral: no CUDA, NVML, NVIDIA, Ascend/ACL or DCMI names.
- A shim names only its own vendor: cuda/ does not include nvml/ and nvml/ does not include cuda/.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOOKCORE = ROOT / "hookcore"
# hand-written sources only (not build/, not the Cython output _hookcore.c)
C_FILES = sorted(p for p in HOOKCORE.rglob("*.[ch]") if "build" not in p.parts and not p.name.startswith("_")) + \
    sorted((ROOT / "tests/hook/c").rglob("*.[ch]")) + sorted(HOOKCORE.rglob("hooks.def"))

BARE_ATOMICS = re.compile(
    r"\b(atomic_(load|store|exchange|fetch_\w+|compare_exchange_\w+|flag\w*|thread_fence|signal_fence)"
    r"|__atomic_\w+|__sync_\w+|memory_order_\w+)\b")
VENDOR = re.compile(r"cuda|nvml|nvidia|ascend|\bacl\b|\baclrt|dcmi|cupti|\bnpu\b", re.I)


def code_lines(path: Path) -> list[tuple[int, str]]:
    """Lines of a C file with comments and string literals blanked (line numbers kept)."""
    text = path.read_text()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return list(enumerate(text.splitlines(), 1))


def test_the_file_lists_are_not_empty() -> None:
    names = {p.name for p in C_FILES}
    assert {"atomic.h", "ledger.c", "meter.c", "dlsym.c", "launch.c", "nvml_hook.c"} <= names


def test_atomics_only_through_atomic_h() -> None:
    bad = []
    for path in C_FILES:
        if path == HOOKCORE / "core/atomic.h":
            continue
        for n, line in code_lines(path):
            if BARE_ATOMICS.search(line):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "use hk_atomic_<op>_<order> from core/atomic.h:\n" + "\n".join(bad)


def test_atomic_h_spells_every_order_out() -> None:
    names = re.findall(r"#define (hk_atomic_\w+)\(", (HOOKCORE / "core/atomic.h").read_text())
    assert names and all(re.search(r"_(relaxed|acquire|release|acq_rel|seq_cst)$", n) for n in names), names


def test_core_and_preload_name_no_vendor() -> None:
    bad = []
    for d in ("core", "preload"):
        for path in sorted((HOOKCORE / d).rglob("*")):
            if path.suffix not in (".c", ".h", ".md") and path.name != "hooks.def":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if VENDOR.search(line):
                    bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "core/ and preload/ must stay vendor-neutral:\n" + "\n".join(bad)


def test_shims_include_only_their_own_vendor() -> None:
    for shim, other in (("cuda", "nvml"), ("nvml", "cuda")):
        for path in sorted((HOOKCORE / shim).glob("*.[ch]")):
            includes = re.findall(r'#include\s+"([^"]+)"', path.read_text())
            assert not [i for i in includes if i.startswith(f"../{other}/")], (path, includes)
