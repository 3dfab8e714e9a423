"""Legacy environment names come from the shims' env_aliases.def, found by library stem.

The Makefile generates hk_env_aliases_for(stem) from SHIMS_<stem>; the Python wrapper uses it, so a
library with aliases needs no edit to the wrapper. Proven here on a library the wrapper has never
heard of, and on the shipped libraries through parse_config.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.hook.conftest import HOOKCORE, cc

LOOKUP = r"""
#include <stdio.h>
#include "core/hookcore.h"
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const hk_env_alias *a = hk_env_aliases_for(argv[i]);
        printf("%s:", argv[i]);
        for (; a && a->name; a++) printf(" %s=%s", a->name, a->key);
        printf("\n");
    }
    return 0;
}
"""


def test_a_new_librarys_aliases_are_found_by_its_stem(tmp_path: Path) -> None:
    shim = tmp_path / "fakeshim"
    shim.mkdir()
    (shim / "env_aliases.def").write_text('HK_ENV_ALIAS("OLD_MEM", "HOOKCORE_MEMORY_LIMIT")\n'
                                          'HK_ENV_ALIAS("OLD_SM", "HOOKCORE_COMPUTE_LIMIT")\n')
    plain = tmp_path / "plainshim"
    plain.mkdir()
    build = tmp_path / "build"
    proc = subprocess.run(["make", "-C", str(HOOKCORE), "-s", f"BUILD={build}", "HOOK_LIBS=vnew v-plain",
                           f"SHIMS_vnew={plain} {shim}", f"SHIMS_v-plain={plain}", "env-aliases"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "lookup.c").write_text(LOOKUP)
    exe = cc(tmp_path / "lookup", f"-I{HOOKCORE}", str(tmp_path / "lookup.c"), str(build / "gen/env_aliases.c"))
    out = subprocess.run([str(exe), "vnew", "v-plain", "vgpu"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["vnew: OLD_MEM=HOOKCORE_MEMORY_LIMIT OLD_SM=HOOKCORE_COMPUTE_LIMIT", "v-plain:", "vgpu:"]


@pytest.mark.parametrize(("stem", "expected"), [("vgpu", 3000 * 2**20), ("vnpu", None), ("other", None)])
def test_parse_config_takes_the_aliases_of_the_stem(hookcore_ext: ModuleType, stem: str, expected: int | None) -> None:
    cfg = hookcore_ext._hookcore.parse_config({"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m"}, stem=stem)
    assert cfg.values()["devices"][0]["memory"] == expected
