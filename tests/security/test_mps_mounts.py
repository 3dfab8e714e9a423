"""No MPS directory a root process writes in is writable from a claim's container (review
2026-12-04 #1).

At 0cee347 every MPS claim's containers got ``<mpsRoot>/<uuid>/pipe`` and ``/log`` read-write:
root in one plants symlinks there, sends ``quit``, and the restarted root control daemon writes
its pid file and log through them into host files (on the H200: the hook's ``ld.so.preload``).
Now the containers get the pipe dir only, read-only, and before every start of a control daemon
the pipe dir is emptied and the log dir made anew, neither following a symlink. The hostile
processes run with the claim's CDI edits applied in a private mount namespace, as a runtime
applies them (`dra.testing.runtime`), as root without CAP_SYS_ADMIN; the control daemon is the
driver's own (`MpsDaemons`, the fake control program, which follows symlinks as the real one did).
That MPS clients still work on the read-only mount is proven on the H200 with the real control
daemon (``bench/mps_mounts_h200.py``, ``bench/results/h200-2026-12-04-mps-mounts``).
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest
from ci_gate import skip_or_fail
from kube_helpers import wait_for
from mps_rig import FAKE_CONTROL, MpsNode, mps_node

from dra.testing.runtime import run_with_cdi, runtime_unavailable

VICTIM_TEXT = "a host file the tenant cannot reach\n"
PLANTED = ("nvidia-cuda-mps-control.pid", "control.log", "control_lock", "control")


def mps_mounts(node: MpsNode, ids: list[str]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The claim's mounts of anything under the MPS root: container path -> (host path, options)."""
    _, mounts = node.cdi(ids)
    return {m.container_path: (m.host_path, tuple(m.options)) for m in mounts
            if os.path.realpath(m.host_path).startswith(str(node.mps_root))}


def test_the_claims_cdi_edits_hold_no_writable_mps_mount_and_no_log_dir(tmp_path: Path) -> None:
    with mps_node(tmp_path) as node:
        error, _, ids = node.prepare("a")
        assert error == ""
        uuid = node.uuid("hami-gpu-0")
        got = mps_mounts(node, ids)
        assert got == {"/run/nvidia-mps": (str(node.mps_root / uuid / "pipe"), ("ro", "nosuid", "nodev", "noexec",
                                                                                 "bind"))}
        env, _ = node.cdi(ids)
        assert "CUDA_MPS_LOG_DIRECTORY" not in env and env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia-mps"


HOSTILE = """
P="$CUDA_MPS_PIPE_DIRECTORY"
plant() {{ for n in {names}; do ln -sf {victim} "$P/$n" 2>/dev/null && echo "planted $n"; done; }}
plant
echo x 2>/dev/null > "$P/x" && echo "wrote a file"
mkdir "$P/d" 2>/dev/null && echo "made a dir"
echo quit | {control}
i=0; while [ -S "$P/control" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
[ -S "$P/control" ] && echo "still running"
plant
echo done
"""


def test_root_in_the_container_plants_no_symlink_and_the_restarted_daemon_writes_no_host_file(tmp_path: Path) -> None:
    """The review's probe: quit, plant symlinks where the control daemon writes, let it restart."""
    skip_or_fail(runtime_unavailable())
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    with mps_node(tmp_path) as node:
        error, _, ids = node.prepare("a")
        assert error == ""
        uuid = node.uuid("hami-gpu-0")
        script = HOSTILE.format(names=" ".join(PLANTED), victim=victim, control=FAKE_CONTROL)
        proc = run_with_cdi(node.root / "cdi", ids, ["sh", "-c", script], drop_capabilities=["sys_admin"])
        assert proc.stdout.split()[-1:] == ["done"], proc.stdout + proc.stderr
        assert "planted" not in proc.stdout and "wrote" not in proc.stdout and "made" not in proc.stdout, proc.stdout
        assert "still running" not in proc.stdout  # root's quit is obeyed (documented: the watcher restarts it)
        node.mps.check()  # the watcher's round: restarted
        assert node.ask(uuid, "get_server_list") is not None
        assert victim.read_text() == VICTIM_TEXT
        pipe = node.mps_root / uuid / "pipe"
        assert not [p.name for p in pipe.iterdir() if p.is_symlink()]


@pytest.mark.parametrize("stamped", [True, False], ids=["emptied-in-place", "first-start-after-upgrade"])
def test_leftovers_of_a_writable_mount_are_wiped_before_a_restart_without_following_them(tmp_path: Path,
                                                                                         stamped: bool) -> None:
    """Defence in depth: what a tenant of an earlier version (pipe and log dirs read-write) left in
    them. Without the wipe the fake daemon writes its pid file and log through these links."""
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir()
    (victim_dir / "keep").write_text("kept\n")
    with mps_node(tmp_path) as node:
        assert node.prepare("a")[0] == ""
        uuid = node.uuid("hami-gpu-0")
        base = node.mps_root / uuid
        first = node.control(uuid)
        first.kill()
        first.wait()
        if not stamped:
            (base / "pipe-read-only").unlink()  # as an earlier version left the GPU's dirs
        held = os.open(base / "pipe", os.O_RDONLY | os.O_DIRECTORY)  # as a container's bind mount holds it
        for d in (base / "pipe", base / "log"):
            for name in PLANTED:
                (d / name).unlink(missing_ok=True)
                (d / name).symlink_to(victim)
            (d / "tree").symlink_to(victim_dir)
        node.mps.check()
        assert node.ask(uuid, "get_server_list") is not None
        assert victim.read_text() == VICTIM_TEXT
        assert [p.name for p in victim_dir.iterdir()] == ["keep"]
        for d in (base / "pipe", base / "log"):
            assert not d.is_symlink() and not [p.name for p in d.iterdir() if p.is_symlink()], list(d.iterdir())
            assert oct(d.stat().st_mode & 0o777) == "0o755"
        # The pipe dir keeps its inode (running containers' read-only mounts hold it), except once
        # after an upgrade: then containers of the earlier version keep a deleted directory.
        try:
            assert (os.fstat(held).st_nlink > 0) is stamped
            assert (os.fstat(held).st_ino == (base / "pipe").stat().st_ino) is stamped
        finally:
            os.close(held)
        assert (base / "pipe-read-only").is_file()


def test_a_running_container_reaches_the_restarted_daemon_through_its_read_only_mount(tmp_path: Path) -> None:
    """Why the pipe dir is emptied in place, not made anew: the container's bind mount holds its inode."""
    skip_or_fail(runtime_unavailable())
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = (f"touch {ready}; i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
              f"echo get_server_list | {FAKE_CONTROL} && echo answered")
    with mps_node(tmp_path) as node:
        error, _, ids = node.prepare("a")
        assert error == ""
        uuid = node.uuid("hami-gpu-0")
        out: list[subprocess.CompletedProcess[str]] = []
        t = threading.Thread(target=lambda: out.append(run_with_cdi(node.root / "cdi", ids, ["sh", "-c", script])))
        t.start()

        def in_place() -> bool:  # the container's namespace and mounts are in place
            assert ready.exists() or t.is_alive(), "the container exited before it was ready"
            return ready.exists()

        wait_for(in_place, 30, 0.02, what="the container to start")
        first = node.control(uuid)
        first.kill()
        first.wait()
        node.mps.check()
        assert node.control(uuid).pid != first.pid
        go.touch()
        t.join(60)
        assert out and "answered" in out[0].stdout, (out[0].stdout + out[0].stderr) if out else "no result"
