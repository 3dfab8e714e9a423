"""The cross-process serialization lock (flock on <plugin dir>/serialize.lock)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from dra._runtime.kubelet import ClaimOutcome, KubeletPaths, KubeletPlugin, LockTimeout, SerializeLock
from dra.driver import ClaimRef
from dra.testing.kubelet import KubeletHarness, RecordingHandler, short_tmpdir


@pytest.fixture
def lock_path() -> Iterator[Path]:
    with short_tmpdir("klock") as d:
        yield d / "plugins" / "drv" / "serialize.lock"


def _hold(path: str, held: multiprocessing.synchronize.Event, release: multiprocessing.synchronize.Event) -> None:
    with SerializeLock(path):
        held.set()
        release.wait(30)


def _try(path: str, timeout: float, q: multiprocessing.Queue[str]) -> None:
    try:
        with SerializeLock(path).acquire(timeout=timeout):
            q.put("acquired")
    except LockTimeout:
        q.put("timeout")


def test_flock_excludes_a_second_process(lock_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    q: multiprocessing.Queue[str] = ctx.Queue()
    holder = ctx.Process(target=_hold, args=(str(lock_path), held, release))
    holder.start()
    try:
        assert held.wait(30)
        assert lock_path.exists()
        contender = ctx.Process(target=_try, args=(str(lock_path), 0.3, q))
        contender.start()
        contender.join(30)
        assert q.get(timeout=5) == "timeout"
        # this process is excluded as well
        with pytest.raises(LockTimeout), SerializeLock(lock_path).acquire(timeout=0.1):
            pass
        release.set()
        holder.join(30)
        contender = ctx.Process(target=_try, args=(str(lock_path), 10.0, q))
        contender.start()
        contender.join(30)
        assert q.get(timeout=5) == "acquired"
    finally:
        release.set()
        holder.join(5)


def test_lock_is_released_when_the_holder_is_killed(lock_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(lock_path), held, release))
    holder.start()
    assert held.wait(30)
    assert holder.pid is not None
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    with SerializeLock(lock_path).acquire(timeout=5):
        pass


def test_threads_are_serialized(lock_path: Path) -> None:
    lock = SerializeLock(lock_path)
    inside = 0
    most = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        for _ in range(20):
            with lock:
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.001)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert most == 1


def test_plugin_serialize_option_holds_the_lock_around_handler_calls() -> None:
    with short_tmpdir("kser") as root:
        paths = KubeletPaths(registrar_dir=root / "reg", plugins_dir=root / "plugins")
        seen: list[bool] = []

        class Probe(RecordingHandler):
            def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimOutcome]:
                try:
                    with SerializeLock(paths.resolve("drv").lock_file).acquire(timeout=0):
                        seen.append(False)
                except LockTimeout:
                    seen.append(True)
                return super().prepare_claims(claims)

        with KubeletPlugin("drv", Probe(), None, paths, serialize=True) as plugin, KubeletHarness(
            paths.registrar_dir
        ) as kubelet:
            assert plugin.lock.path == root / "plugins" / "drv" / "serialize.lock"
            kubelet.wait_for_plugin("drv")
            assert kubelet.prepare([ClaimRef("u", "ns", "c")])["u"].error == ""
        assert seen == [True]
