"""`dra top`'s snapshot from API objects and daemon scrapes, its JSON and its rich table (pure:
the scrapes carry their own times, so the compute rates are checked without a clock)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dra._runtime.top import metrics, model, sources
from dra._runtime.top.view import render

GPU = "hami-core-gpu.project-hami.io"
Gi, Mi = 1 << 30, 1 << 20


def device(name: str, uuid: str, memory: str = "80Gi", cores: str | None = "100", kind: str = "hami-gpu") -> dict[str, Any]:
    cap = {"memory": {"value": memory}, **({"cores": {"value": cores}} if cores else {})}
    return {"name": name, "attributes": {"uuid": {"string": uuid}, "type": {"string": kind},
                                         "productName": {"string": "NVIDIA A100"}}, "capacity": cap}


def slice_(node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"spec": {"nodeName": node, "driver": GPU, "pool": {"name": node}, "devices": devices}}


def claim(name: str, uid: str, results: list[dict[str, Any]] | None, pods: tuple[str, ...] = (),
          ns: str = "team-a") -> dict[str, Any]:
    status: dict[str, Any] = {}
    if results is not None:
        status["allocation"] = {"devices": {"results": results}}
        status["reservedFor"] = [{"resource": "pods", "name": p, "uid": f"u-{p}"} for p in pods]
    return {"metadata": {"namespace": ns, "name": name, "uid": uid}, "status": status}


def result(node: str, dev: str, request: str = "gpu", **consumed: str) -> dict[str, Any]:
    return {"driver": GPU, "pool": node, "device": dev, "request": request,
            **({"consumedCapacity": consumed} if consumed else {})}


def exposition(lines: list[str]) -> tuple[metrics.Sample, ...]:
    return tuple(metrics.parse("\n".join(lines) + "\n"))


def ledger(name: str, uid: str, index: int, dev: str, value: float, claim_name: str = "c") -> str:
    return (f'{name}{{driver="{GPU}",namespace="team-a",claim="{claim_name}",claim_uid="{uid}",index="{index}",'
            f'uuid="GPU-x",device="{dev}"}} {value}')


SLICES = [slice_("n1", [device("gpu-0", "GPU-0"), device("gpu-1", "GPU-1"),
                        device("gpu-0-mig-1g", "MIG-0", memory="18Gi", cores=None, kind="mig")]),
          slice_("n2", [device("gpu-0", "GPU-20")])]
CLAIMS = [
    # two requests of one claim on one GPU: one row, requests summed
    claim("half", "u1", [result("n1", "gpu-0", "a", memory="20Gi", cores="25"),
                         result("n1", "gpu-0", "b", memory="20Gi", cores="25")], pods=("trainer",)),
    claim("small", "u2", [result("n1", "gpu-1", memory="3000Mi", cores="30")], pods=("p1", "p2")),
    claim("mig", "u3", [result("n1", "gpu-0-mig-1g")]),  # a whole device: its capacity
    claim("other-node", "u4", [result("n2", "gpu-0", memory="1Gi", cores="10")]),
    claim("waiting", "u5", None),
]


def scrapes(at: float, charged: float) -> list[model.Scrape]:
    n1 = exposition([
        ledger("dra_claim_memory_used_bytes", "u1", 0, "gpu-0", 12 * Gi),
        ledger("dra_claim_memory_peak_bytes", "u1", 0, "gpu-0", 16 * Gi),
        ledger("dra_claim_memory_limit_bytes", "u1", 0, "gpu-0", 40 * Gi),
        ledger("dra_claim_compute_limit_percent", "u1", 0, "gpu-0", 50),
        ledger("dra_claim_processes", "u1", 0, "gpu-0", 2),
        ledger("dra_claim_compute_seconds_total", "u1", 0, "gpu-0", charged),
        # no `device` label: the claim's index-th device of the driver on the node
        ledger("dra_claim_memory_used_bytes", "u2", 0, "", 1000 * Mi),
        f'dra_claim_memory_over_quota_bytes{{driver="{GPU}",namespace="team-a",claim="small",claim_uid="u2",device="gpu-1"}} {Gi}',
        f'dra_device_processes{{driver="{GPU}",device="gpu-0"}} 3',
        f'dra_device_processes_unheld{{driver="{GPU}",device="gpu-0"}} 1',
        f'dra_device_processes_unverified{{driver="{GPU}",device="gpu-0"}} 0',
        f'dra_watchdog_verdicts_total{{driver="{GPU}",verdict="unheld"}} 4',
        f'dra_watchdog_verdicts_total{{driver="{GPU}",verdict="over-quota"}} 1',
    ])
    return [model.Scrape("n1", "http://n1:8080/metrics", at, n1),
            model.Scrape("n2", "http://n2:8080/metrics", at, error="connection refused")]


def snapshot(node: str | None = None) -> model.Snapshot:
    first = {(s.node, s.url): s for s in scrapes(100.0, 10.0)}
    return model.build(SLICES, CLAIMS, scrapes(102.0, 10.6), first, node)


def by_name(snap: model.Snapshot) -> dict[str, model.Share]:
    return {s.name: s for s in snap.shares}


def test_every_allocated_claim_is_a_row_on_its_device_with_requested_and_used() -> None:
    snap = snapshot()
    shares = by_name(snap)
    half = shares["half"]
    assert (half.node, half.device, half.requests, half.pods) == ("n1", "gpu-0", ["a", "b"], ["team-a/trainer"])
    assert (half.requested_memory, half.requested_cores) == (40 * Gi, 50)
    assert (half.used_memory, half.peak_memory, half.limit_memory, half.limit_cores, half.processes) == (
        12 * Gi, 16 * Gi, 40 * Gi, 50, 2)
    assert half.used_cores == pytest.approx(30.0)  # 0.6 s of device time charged in 2 s: 30 % of the GPU
    small = shares["small"]
    assert (small.requested_memory, small.requested_cores, small.used_memory) == (3000 * Mi, 30, 1000 * Mi)
    assert small.used_cores is None and small.over_quota_bytes == Gi
    mig = shares["mig"]
    assert (mig.requested_memory, mig.requested_cores, mig.used_memory) == (18 * Gi, None, None)
    assert shares["other-node"].used_memory is None  # its node's endpoint is unreachable
    assert snap.pending == [{"namespace": "team-a", "name": "waiting", "uid": "u5"}]
    assert snap.interval == pytest.approx(2.0)


def test_devices_sum_their_claims_and_carry_the_watchdogs_counts() -> None:
    (n1, n2) = snapshot().nodes
    gpu0 = next(d for d in n1.devices if d.name == "gpu-0")
    assert (gpu0.memory, gpu0.cores, gpu0.requested_memory, gpu0.requested_cores) == (80 * Gi, 100, 40 * Gi, 50)
    assert (gpu0.used_memory, gpu0.processes, gpu0.unheld, gpu0.unverified) == (12 * Gi, 3, 1, 0)
    assert n1.verdicts == {"unheld": 4, "over-quota": 1}
    assert n2.endpoints == [("http://n2:8080/metrics", "connection refused")] and n2.verdicts == {}


def test_the_json_document_lists_every_claim_with_device_requested_and_used() -> None:
    doc = json.loads(json.dumps(snapshot().json()))
    rows = {c["name"]: c for c in doc["claims"]}
    assert set(rows) == {"half", "small", "mig", "other-node"}
    assert rows["half"]["device"] == "gpu-0" and rows["half"]["requested"] == {"memory": 40 * Gi, "cores": 50}
    assert rows["half"]["used"]["memory"] == 12 * Gi and rows["half"]["used"]["cores"] == pytest.approx(30.0)
    assert [n["name"] for n in doc["nodes"]] == ["n1", "n2"]
    assert doc["nodes"][1]["metrics"] == [{"url": "http://n2:8080/metrics", "error": "connection refused"}]


def test_one_node_only() -> None:
    snap = snapshot("n2")
    assert [n.name for n in snap.nodes] == ["n2"] and [s.name for s in snap.shares] == ["other-node"]
    assert snap.pending == []


def test_without_a_previous_scrape_or_after_a_daemon_restart_no_rate_is_made_up() -> None:
    assert by_name(model.build(SLICES, CLAIMS, scrapes(102.0, 10.6)))["half"].used_cores is None
    restarted = {(s.node, s.url): s for s in scrapes(100.0, 50.0)}  # the counter went down: a new daemon
    assert by_name(model.build(SLICES, CLAIMS, scrapes(102.0, 0.1), restarted))["half"].used_cores is None


def text(snap: model.Snapshot) -> str:
    console = Console(record=True, width=220, color_system=None)
    console.print(render(snap))
    return console.export_text()


def test_the_table_shows_each_device_and_the_claims_on_it() -> None:
    out = text(snapshot())
    lines = out.splitlines()
    gpu0 = next(i for i, ln in enumerate(lines) if "gpu-0  NVIDIA A100" in ln)
    half = next(i for i, ln in enumerate(lines) if "team-a/half" in ln)
    assert half > gpu0
    assert all(v in lines[half] for v in ("trainer", "40Gi", "12Gi", "16Gi", "50", "30", "2"))
    assert "40Gi/80Gi" in lines[gpu0] and "50/100" in lines[gpu0] and "1 unheld" in lines[gpu0]
    small = next(ln for ln in lines if "team-a/small" in ln)
    assert "p1, p2" in small and "2.9Gi" in small and "1000Mi" in small and "memory +1Gi over quota" in small
    assert "unreachable: connection refused" in out and "verdicts: over-quota 1, unheld 4" in out
    assert "not allocated: team-a/waiting" in out


def test_the_table_before_the_second_scrape_says_why_cores_used_is_empty() -> None:
    out = text(model.build(SLICES, CLAIMS, scrapes(102.0, 10.6)))
    assert "cores used: known from the second refresh" in out


def test_hostile_exposition_values_and_names_draw_as_text() -> None:
    """The ledger is the tenant's word (its used memory, processes): absurd values are shown as
    numbers, NaN and infinities dropped; names and the endpoint cannot inject console markup;
    a broken exposition is that endpoint's error, not the command's."""
    samples = exposition([
        ledger("dra_claim_memory_used_bytes", "u1", 0, "gpu-0", 1e30, claim_name="[red]x[/red]"),
        ledger("dra_claim_processes", "u1", 0, "gpu-0", float("nan")),
        ledger("dra_claim_memory_peak_bytes", "u1", 0, "gpu-0", float("inf")),
    ])
    snap = model.build(SLICES, CLAIMS, [model.Scrape("n1", "http://[bold]evil[/bold]/metrics", 1.0, samples)])
    half = by_name(snap)["half"]
    assert half.used_memory == int(1e30) and half.processes is None and half.peak_memory is None
    out = text(snap)
    assert "http://[bold]evil[/bold]/metrics" in out
    with pytest.raises(ValueError, match="not a Prometheus exposition"):
        metrics.parse('dra_claim_processes{claim_uid="u1" 1\n')

    def broken() -> bytes:
        return b'dra_claim_processes{claim_uid="u1" 1\n'

    (s,) = sources.scrape([sources.Endpoint("n1", "http://n1/metrics", broken)])
    assert s.error and "not a Prometheus exposition" in s.error and s.samples == ()


def test_metrics_endpoints_named_on_the_command_line() -> None:
    got = sources.named(["n1=http://127.0.0.1:8080/metrics", "http://127.0.0.1:8081/metrics"], "n1")
    assert [(e.node, e.url) for e in got] == [("n1", "http://127.0.0.1:8080/metrics"), ("n1", "http://127.0.0.1:8081/metrics")]
    from dra.errors import UserError

    with pytest.raises(UserError, match="NODE=URL"):
        sources.named(["http://127.0.0.1:8080/metrics"], None)
    with pytest.raises(UserError, match="http:// or https://"):
        sources.named(["n1=file:///etc/shadow"], None)


@pytest.mark.parametrize(("args", "message"), [
    (["-o", "json"], "add --once"),
    (["--once", "-o", "yaml"], "expected table or json"),
    (["--once", "--metrics-via", "ssh"], "expected proxy, direct, none"),
])
def test_the_command_refuses_what_it_cannot_do(args: list[str], message: str) -> None:
    from dra.cli import build_app

    got = CliRunner().invoke(build_app("top"), ["top", *args])
    assert got.exit_code != 0 and message in str(got.exception), (got.output, got.exception)
