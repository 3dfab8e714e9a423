"""A Prometheus process for tests and the docs' picture: file-discovered targets, rule files, its API.

Each job's targets live in ``<dir>/targets/<job>.json`` (file_sd, which Prometheus watches with
inotify), so a test adds, moves or removes a daemon without a restart. Scrape and rule
evaluation intervals are short (1 s by default) so alerts with short `for:` fire and resolve in
seconds. It listens on a free loopback port; its TSDB lives in the directory.
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dra._runtime.wait import until
from dra.errors import UserError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    """One `prometheus` with `jobs` (names; targets set with `targets`) and `rule_files`."""

    def __init__(self, binary_dir: Path, directory: Path, jobs: Sequence[str], rule_files: Sequence[Path] = (),
                 *, scrape_interval: str = "1s", evaluation_interval: str = "1s") -> None:
        self.binary = binary_dir / "prometheus"
        self.directory = directory
        self.jobs = tuple(jobs)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = directory / "prometheus.log"
        (directory / "targets").mkdir(parents=True, exist_ok=True)
        for job in self.jobs:
            self.targets(job, [])
        config = {
            "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                       "evaluation_interval": evaluation_interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": job, "file_sd_configs": [{"files": [str(self._targets_file(job))]}]}
                               for job in self.jobs],
        }
        self.config = directory / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))
        self.proc: subprocess.Popen[bytes] | None = None

    def _targets_file(self, job: str) -> Path:
        return self.directory / "targets" / f"{job}.json"

    def targets(self, job: str, targets: Sequence[tuple[str, Mapping[str, str]]]) -> None:
        """Scrape `job` at these ``host:port`` addresses, each with its extra labels (written atomically)."""
        groups = [{"targets": [address], "labels": dict(labels)} for address, labels in targets]
        path = self._targets_file(job)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(path)

    def start(self, timeout: float = 60.0) -> Prometheus:
        argv = [str(self.binary), f"--config.file={self.config}", f"--storage.tsdb.path={self.directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise UserError(f"prometheus exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        until(ready, timeout=timeout, interval=0.1, what="prometheus to be ready")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # ---- the HTTP API ----------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the ``data`` of a successful answer (UserError otherwise)."""
        url = f"{self.url}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise UserError(f"prometheus {path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's series: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        data = self.api("query", query=expr)
        return list(data["result"]) if data["resultType"] == "vector" else []

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query's series: ``[{"metric": {...}, "values": [[t, "v"], ...]}, ...]``."""
        return list(self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """The pending and firing alerts (``labels``, ``annotations``, ``state``, ``activeAt``)."""
        return list(self.api("alerts")["alerts"])

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (``name``, ``query``, ``state``, ``health``, ``lastError``) of every group."""
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]

    def targets_up(self, job: str) -> list[dict[str, Any]]:
        """The job's active targets with their ``health`` (up, down, unknown)."""
        return [t for t in self.api("targets")["activeTargets"] if t["labels"].get("job") == job]
