"""Priorities through the real prepare path (issue 26, item 3): who may be high, and what each
claim's containers may do with the GPU's priority board.

- ``priority: high`` takes time from other tenants: from a claim's own config it is a loosening,
  refused at prepare and by the webhook unless the admin allows it; from a DeviceClass it is the
  admin's word.
- The board (``<state>/boards/<uuid>``) is mounted writable into a high claim's containers and
  read-only into a normal one's: root in a normal claim's container, without CAP_SYS_ADMIN, cannot
  write, truncate or replace it; whatever a high claim's container appends is cut back by
  `LedgerGuard`. The hook's side (environment, ledger, forged marks) is in tests/hook/test_priority.py
  and hookcore/core/tests/test_priority.c.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ci_gate import skip_or_fail
from prepare_rig import GPU, Node, cfg, claim_review, nodes, opaque, validate

from dra._runtime.enforcement import BOARD_BYTES, LedgerGuard
from dra.testing.cdi import apply_cdi
from dra.testing.runtime import run_with_cdi, runtime_unavailable

HIGH_WORDS = "priority=high is weaker than the default unset"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    with nodes(tmp_path) as build:
        yield build


def board_mounts(n: Node, uid: str) -> dict[str, tuple[str, ...]]:
    out = n.prep.checkpoint.get(uid)
    assert out is not None
    _, mounts = apply_cdi(n.root / "cdi", [i for d in out.devices for i in d.cdi_ids])
    return {m.container_path: tuple(m.options) for m in mounts if "/priority/" in m.container_path}


def test_prepare_refuses_a_claims_own_high_priority(node: Callable[..., Node]) -> None:
    n = node()
    error, ref = n.prepare(opaque(GPU, cfg(priority="high")))
    assert HIGH_WORDS in error and "allowClaimLoosening" in error, error
    assert n.nothing_left(ref)
    error, ref = n.prepare(opaque(GPU, cfg(priority="normal")))  # asking for less is the claim's choice
    assert error == "" and n.hook_config(ref)["HOOKCORE_PRIORITY_0"] == "normal"


def test_the_webhook_refuses_a_claims_own_high_priority_with_the_same_words() -> None:
    resp = validate(claim_review([cfg(priority="high")]))
    assert resp["allowed"] is False and HIGH_WORDS in resp["status"]["message"], resp
    assert validate(claim_review([cfg(priority="high")]), allow=True)["allowed"] is True
    assert validate(claim_review([cfg(priority="high")]),
                    classes={"hami-core-gpu.project-hami.io": [cfg(priority="high")]})["allowed"] is True


def test_high_from_the_class_mounts_the_board_writable_and_a_normal_claim_reads_it(node: Callable[..., Node]) -> None:
    n = node()
    error, hi = n.prepare(opaque(GPU, cfg(priority="high"), "FromClass"))
    assert error == "", error
    error, lo = n.prepare()
    assert error == "", error
    (path_hi, opts_hi), = board_mounts(n, hi.uid).items()
    (path_lo, opts_lo), = board_mounts(n, lo.uid).items()
    assert path_hi == path_lo and path_hi.startswith("/run/hookcore/vgpu/priority/GPU-")  # one board per GPU
    assert "rw" in opts_hi and "ro" in opts_lo, (opts_hi, opts_lo)
    assert n.hook_config(hi)["HOOKCORE_PRIORITY_0"] == "high" and n.hook_config(lo)["HOOKCORE_PRIORITY_0"] == "normal"
    assert n.hook_config(lo)["HOOKCORE_PRIORITY_BOARD"] == "/run/hookcore/vgpu/priority"
    board = n.root / "state" / "boards" / path_hi.rsplit("/", 1)[1]
    assert board.read_bytes() == bytes(BOARD_BYTES)


HOSTILE = """
b=$(ls /run/hookcore/vgpu/priority/*)
printf 'xxxxxxxxxxxxxxxx' 2>/dev/null > "$b" && echo wrote
printf 'x' 2>/dev/null >> "$b" && echo appended
truncate -s 0 "$b" 2>/dev/null && echo truncated
rm -f "$b" 2>/dev/null && echo removed
mv "$b" "$b.x" 2>/dev/null && echo renamed
umount "$b" 2>/dev/null && echo unmounted
echo done
"""


def test_root_in_a_normal_claims_container_cannot_write_the_board(node: Callable[..., Node]) -> None:
    skip_or_fail(runtime_unavailable())
    n = node()
    error, ref = n.prepare()
    assert error == "", error
    out = n.prep.checkpoint.get(ref.uid)
    assert out is not None
    proc = run_with_cdi(n.root / "cdi", [i for d in out.devices for i in d.cdi_ids], ["sh", "-c", HOSTILE],
                        drop_capabilities=["sys_admin"])
    words = proc.stdout.split()
    assert proc.returncode == 0 and words[-1] == "done", proc.stdout + proc.stderr
    assert words == ["done"], proc.stdout
    (board,) = (n.root / "state" / "boards").iterdir()
    assert board.read_bytes() == bytes(BOARD_BYTES)


def test_a_board_a_high_claim_grew_is_cut_back(node: Callable[..., Node]) -> None:
    n = node()
    error, _ = n.prepare(opaque(GPU, cfg(priority="high"), "FromClass"))
    assert error == "", error
    (board,) = (n.root / "state" / "boards").iterdir()
    with open(board, "ab") as f:  # what a high claim's container can do through its writable mount
        f.write(b"x" * (8 << 20))
    cut: list[str] = []
    guard = LedgerGuard(n.prep.hooks, cut.append)
    assert guard.check() == [f"board:{board.name}"] and cut == [f"board:{board.name}"]
    assert board.stat().st_size == BOARD_BYTES
    assert guard.check() == []


def boards(n: Node) -> list[str]:
    root = n.root / "state" / "boards"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def test_a_board_goes_with_the_last_claim_that_names_it(node: Callable[..., Node]) -> None:
    n = node()
    error, hi = n.prepare(opaque(GPU, cfg(priority="high"), "FromClass"))
    assert error == "", error
    error, lo = n.prepare()
    assert error == "", error
    (board,) = boards(n)
    assert n.prep.unprepare_claims([hi])[hi.uid] == ""
    assert boards(n) == [board]  # the normal claim still reads it: kept, the same file
    assert n.prep.unprepare_claims([lo])[lo.uid] == ""
    assert boards(n) == []  # nothing names it: gone (helm uninstall leaves no file of ours)
    error, _ = n.prepare()
    assert error == "" and boards(n) == [board]  # made again by the next claim
    assert (n.root / "state" / "boards" / board).read_bytes() == bytes(BOARD_BYTES)


def test_a_restart_sweeps_the_boards_no_claim_names(node: Callable[..., Node]) -> None:
    n = node()
    error, _ = n.prepare()
    assert error == "", error
    (kept,) = boards(n)
    stale = n.root / "state" / "boards" / "GPU-00000000-0000-0000-0000-000000000000"  # a crash between remove and sweep
    stale.write_bytes(bytes(BOARD_BYTES))
    removed = n.prep.start()
    assert str(stale) in removed and boards(n) == [kept]


def test_an_unreadable_claim_config_keeps_every_board(node: Callable[..., Node]) -> None:
    """Fail safe: a board is removed only when every claim's config says it is unused."""
    n = node()
    error, a = n.prepare()
    assert error == "", error
    error, b = n.prepare()
    assert error == "", error
    (board,) = boards(n)
    (n.root / "state" / "hooks" / b.uid / "config").write_text("HOOKCORE_PRIORITY_BOARD=/x\nHOOKCORE_MEMORY_LIMIT=junk\n")
    assert n.prep.unprepare_claims([a])[a.uid] == ""
    assert boards(n) == [board]
