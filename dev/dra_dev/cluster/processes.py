"""Detached processes of the embedded cluster (the control plane's, a real node's).

Each runs in its own session, so it outlives the command that started it, with its output
appended to a log. It is recorded by PID and binary; `stop` signals a PID only while it still runs
the binary recorded for it, so a reused PID is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dra._runtime.wait import WaitTimeout, until
from dra.errors import UserError


@dataclass
class ProcessRecord:
    pid: int
    binary: str
    log: str


def pid_runs(rec: ProcessRecord) -> bool:
    """True when `rec.pid` is alive and still runs the binary we started (not a reused PID)."""
    try:
        cmd = Path(f"/proc/{rec.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        stat = Path(f"/proc/{rec.pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return cmd == rec.binary and state != "Z"


def save_state(path: Path, state: Any) -> None:
    """Write a dataclass as JSON through a temporary file, so a reader never sees half of it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    tmp.replace(path)


class Processes:
    """Starts, watches and stops the detached processes of one directory."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, binary: Path | str, args: Sequence[str], log: Path,
              env: Mapping[str, str] | None = None, fix: str = "") -> ProcessRecord:
        """Start `binary args` detached; `fix` says what to do if it cannot be executed."""
        with log.open("ab") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {binary} {' '.join(args)}\n".encode())
            try:
                proc = subprocess.Popen([str(binary), *args], stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.cwd,
                                        env=dict(env) if env is not None else None)
            except OSError as exc:
                raise UserError(f"cannot start {name} ({binary}): {exc}; {fix}".rstrip("; ")) from exc
        self._children[name] = proc
        return ProcessRecord(proc.pid, str(binary), str(log))

    def alive(self, name: str, rec: ProcessRecord | None) -> bool:
        """Our own children are judged by `poll()` (which also reaps them), others through /proc."""
        child = self._children.get(name)
        if child is not None and rec is not None and child.pid == rec.pid:
            return child.poll() is None
        return rec is not None and pid_runs(rec)

    def stop(self, name: str, rec: ProcessRecord | None, grace: float = 15.0) -> bool:
        """SIGTERM, then SIGKILL after `grace` seconds; False when it was not running."""
        if rec is None or not self.alive(name, rec):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(rec.pid, signal.SIGTERM)
        with contextlib.suppress(WaitTimeout):  # a grace period, then SIGKILL
            until(lambda: not self.alive(name, rec), timeout=grace, interval=0.1, what=f"{name} to exit")
        if self.alive(name, rec):
            with contextlib.suppress(ProcessLookupError):
                os.kill(rec.pid, signal.SIGKILL)
            while self.alive(name, rec):
                time.sleep(0.05)
        return True
