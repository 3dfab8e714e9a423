"""Rules for hookcore's C sources that a reviewer would otherwise have to remember.

- One atomics style: every atomic operation goes through core/atomic.h, whose names carry the
  memory order (hk_atomic_load_acquire, ...). The bare C11 forms, GCC's __atomic/__sync builtins,
  memory_order_* constants and atomic_flag appear nowhere else.
- core/, preload/ and the Python wrapper (_hookcore.pyx/.pxd) are vendor-neutral: no CUDA, NVML,
  NVIDIA (nor its "GPU-" UUID form), Ascend/ACL or DCMI names, in code and comments alike.
- A shim names only its own vendor: cuda/ does not include nvml/ and nvml/ does not include cuda/.
- One layout: every C file of hookcore/ and of the tests is as the repository's .clang-format says
  (clang-format pinned in pyproject's dev extras).
- Files a reader can hold: no C file of hookcore/ or of the tests is over 600 lines (split one along
  its seams, as memory.c, ledger.c, config.c, the stubs and test_core.c were).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOKCORE = ROOT / "hookcore"
# hand-written sources only (not build/, not the Cython output _hookcore.c)
C_FILES = sorted(p for p in HOOKCORE.rglob("*.[ch]") if "build" not in p.parts and not p.name.startswith("_")) + \
    sorted((ROOT / "tests/hook/c").rglob("*.[ch]")) + sorted(HOOKCORE.rglob("hooks.def"))

BARE_ATOMICS = re.compile(
    r"\b(atomic_(load|store|exchange|fetch_\w+|compare_exchange_\w+|flag\w*|thread_fence|signal_fence)"
    r"|__atomic_\w+|__sync_\w+|memory_order_\w+)\b")
VENDOR = re.compile(r"cuda|nvml|nvidia|\bgpu-|ascend|\bacl\b|\baclrt|dcmi|cupti|\bnpu\b", re.I)
# The files that must stay neutral: the core, the preload layer, the wrapper the runtime imports.
NEUTRAL_DIRS = ("core", "preload")
NEUTRAL_FILES = ("_hookcore.pyx", "_hookcore.pxd")


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


def neutral_files(root: Path) -> list[Path]:
    files = [p for d in NEUTRAL_DIRS for p in sorted((root / d).rglob("*"))
             if p.suffix in (".c", ".h", ".md", ".def") and "build" not in p.parts]
    return files + [root / name for name in NEUTRAL_FILES if (root / name).exists()]


def vendor_hits(root: Path) -> list[str]:
    """Every line of the neutral files, comments and strings included, that names a vendor."""
    bad = []
    for path in neutral_files(root):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if VENDOR.search(line):
                bad.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return bad


def test_core_preload_and_wrapper_name_no_vendor() -> None:
    assert {"hookcore.h", "preload.h", "_hookcore.pyx", "_hookcore.pxd"} <= {p.name for p in neutral_files(HOOKCORE)}
    bad = vendor_hits(HOOKCORE)
    assert not bad, "core/, preload/ and the wrapper must stay vendor-neutral:\n" + "\n".join(bad)


@pytest.mark.parametrize(("where", "line"), [
    ("core/x.c", 'memcpy(o, "GPU-", 4);'),              # NVIDIA's UUID form, in a string
    ("core/x.h", "/* a gpu-0123 UUID */"),              # in a comment, lower case
    ("preload/y.c", "#include <cuda.h>"),
    ("core/tests/t.c", "int npu = 0;"),
    ("_hookcore.pyx", 'if stem == "vgpu": return nvml_aliases'),
    ("_hookcore.pxd", 'cdef extern from "../ascend/x.h":'),
])
def test_the_vendor_rule_fires(tmp_path: Path, where: str, line: str) -> None:
    """The rule catches what it is for, in every kind of file it scans (and spares neutral text)."""
    for d in NEUTRAL_DIRS:
        (tmp_path / d).mkdir()
    (tmp_path / "core/ok.c").write_text("/* device-time token bucket; a KIND-0123 UUID; libvgpu.so */\n")
    assert vendor_hits(tmp_path) == []
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"/* neutral */\n{line}\n")
    assert vendor_hits(tmp_path) == [f"{where}:2: {line}"]


def test_shims_include_only_their_own_vendor() -> None:
    for shim, other in (("cuda", "nvml"), ("nvml", "cuda")):
        for path in sorted((HOOKCORE / shim).glob("*.[ch]")):
            includes = re.findall(r'#include\s+"([^"]+)"', path.read_text())
            assert not [i for i in includes if i.startswith(f"../{other}/")], (path, includes)


def formatted_files() -> list[Path]:
    dirs = [HOOKCORE, ROOT / "tests/hook/c", ROOT / "tests/ascend/c", ROOT / "tests/hygon_dcu/c"]
    return sorted(p for d in dirs for p in d.rglob("*.[ch]") if "build" not in p.relative_to(d).parts
                  and not p.name.startswith("_"))


def clang_format() -> str:
    exe = Path(sys.executable).parent / "clang-format"
    found = str(exe) if exe.exists() else shutil.which("clang-format")
    assert found, "clang-format missing: pip install -e '.[dev]' installs the pinned one"
    return found


def test_c_files_follow_the_clang_format_style() -> None:
    files = formatted_files()
    assert {"config.c", "test_core.c", "stub_grammar.c", "shim_client.c"} <= {p.name for p in files}
    proc = subprocess.run([clang_format(), "--dry-run", "--Werror", *map(str, files)], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, "run clang-format -i on these (style in .clang-format):\n" + proc.stderr[-4000:]


def test_the_format_check_fires(tmp_path: Path) -> None:
    (tmp_path / ".clang-format").write_text((ROOT / ".clang-format").read_text())
    bad = tmp_path / "bad.c"
    bad.write_text("int f(void) {\n  return 1;\n}\n")   # two-space indent
    proc = subprocess.run([clang_format(), "--dry-run", "--Werror", str(bad)], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode != 0 and "bad.c" in proc.stderr


MAX_LINES = 600


def long_files(files: list[Path], root: Path = ROOT) -> list[str]:
    return [f"{p.relative_to(root)}: {n} lines" for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES]


def test_no_c_file_is_over_600_lines() -> None:
    files = formatted_files()
    assert {"ledger.c", "memory.c", "cuda_stub.c", "shim_client.c", "test_core.c"} <= {p.name for p in files}
    bad = long_files(files)
    assert not bad, f"split these along their seams (at most {MAX_LINES} lines):\n" + "\n".join(bad)


def test_the_length_rule_fires(tmp_path: Path) -> None:
    (tmp_path / "ok.c").write_text("int x;\n" * MAX_LINES)
    (tmp_path / "long.c").write_text("int x;\n" * (MAX_LINES + 1))
    assert long_files(sorted(tmp_path.glob("*.c")), tmp_path) == [f"long.c: {MAX_LINES + 1} lines"]
