"""MPS claims of different tenants never share a server unless the admin says so, and the hook's
compute limit stays a ceiling under MPS (review 2026-12-04 #11 and the runtime half of #5).

#11: at 0cee347 one MPS server per GPU served every namespace's claims: one fault domain, one
client uid at a time (a client of another uid waits until the server's clients end, H200), and
root in any container could ``quit`` it for all. Now ``mpsSharing=namespace`` (the default)
refuses, at prepare, a claim of another namespace than the GPU's MPS claims (kubelet retries;
it is prepared once they end); ``mpsSharing=any`` is the admin accepting shared servers. Root in
a container can still send ``quit`` through the read-only pipe (connect() needs no write access;
H200: obeyed), non-root cannot ("Not enough privilege", H200 and the fake alike): with one
namespace per server that reaches only the tenant's own claims.

#5 (runtime half): under MPS the claim's ``cores`` went only to ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``,
the tenant's own environment; the hook's config said 100. Now the hook's read-only config holds
the claim's cores as well (a ceiling the environment cannot lift; the hook ignores quota
variables of the environment once a config exists: tests/security/test_hook_ledger.py).
"""

from __future__ import annotations

from pathlib import Path

from ci_gate import skip_or_fail
from mps_rig import FAKE_CONTROL, mps_node

from dra.testing.runtime import run_with_cdi, runtime_unavailable


def test_a_claim_of_another_namespace_is_refused_until_the_gpus_mps_claims_end(tmp_path: Path) -> None:
    with mps_node(tmp_path) as node:
        uuid = node.uuid("hami-gpu-0")
        error, a, _ = node.prepare("a", namespace="team-a")
        assert error == ""
        error, b, _ = node.prepare("b", namespace="team-b", cores="20")
        assert "'team-a'" in error and "'team-b'" in error and "mpsSharing" in error and "hami-gpu-0" in error, error
        assert node.mps.namespaces(uuid) == {a.uid: "team-a"}  # nothing of b recorded
        assert node.prep.checkpoint.get(b.uid) is None
        error, a2, _ = node.prepare("a2", namespace="team-a", cores="20")
        assert error == ""  # the same tenant shares its server
        assert node.prepare("c", namespace="team-b", device="hami-gpu-1")[0] == ""  # another GPU: its own server
        assert node.unprepare(a) == "" and node.unprepare(a2) == ""
        error, again, _ = node.prepare("b", namespace="team-b", cores="20", uid=b.uid)  # kubelet's retry
        assert error == "" and again == b
        assert node.mps.namespaces(uuid) == {b.uid: "team-b"}


def test_mps_sharing_any_lets_namespaces_share_a_server(tmp_path: Path) -> None:
    with mps_node(tmp_path, {"mpsSharing": "any"}) as node:
        uuid = node.uuid("hami-gpu-0")
        _, a, _ = node.prepare("a", namespace="team-a")
        error, b, _ = node.prepare("b", namespace="team-b", cores="20")
        assert error == ""
        assert node.mps.namespaces(uuid) == {a.uid: "team-a", b.uid: "team-b"}


def test_a_record_of_an_earlier_version_counts_as_another_namespace(tmp_path: Path) -> None:
    """An MPS claim prepared before this rule left an empty directory, no namespace: refused safe."""
    with mps_node(tmp_path) as node:
        uuid = node.uuid("hami-gpu-0")
        _, a, _ = node.prepare("a", namespace="team-a")
        old = node.mps_root / uuid / "claims" / "0ld0ld00-0000-4000-8000-000000000001"
        old.mkdir()
        error = node.prepare("a2", namespace="team-a", cores="20")[0]
        assert "unknown namespace" in error and "mpsSharing" in error, error
        node.mps.remove_claim(uuid, old.name)  # its unprepare
        assert node.prepare("a2", namespace="team-a", cores="20")[0] == ""
        assert node.unprepare(a) == ""


def test_only_root_can_quit_the_server_through_the_read_only_pipe(tmp_path: Path) -> None:
    """What remains, documented: root's quit is obeyed (the watcher restarts the daemon), others'
    is refused; the server it stops serves the tenant's own namespace only."""
    skip_or_fail(runtime_unavailable())
    script = (f"echo quit | setpriv --reuid=65534 --regid=65534 --clear-groups -- {FAKE_CONTROL}; "
              f"echo get_server_list | {FAKE_CONTROL} >/dev/null && echo alive; echo quit | {FAKE_CONTROL}; echo done")
    with mps_node(tmp_path) as node:
        uuid = node.uuid("hami-gpu-0")
        error, _, ids = node.prepare("a", namespace="team-a")
        assert error == ""
        first = node.control(uuid)
        proc = run_with_cdi(node.root / "cdi", ids, ["sh", "-c", script], drop_capabilities=["sys_admin"])
        assert "Not enough privilege to execute quit command" in proc.stdout and "alive" in proc.stdout, proc.stdout
        first.wait(10)  # root's quit
        node.mps.check()
        assert node.ask(uuid, "get_server_list") is not None and node.mps.status()[uuid].restarts == 1


def test_the_hooks_config_holds_an_mps_claims_cores_as_a_ceiling(tmp_path: Path) -> None:
    with mps_node(tmp_path) as node:
        error, ref, ids = node.prepare("a", cores="30")
        assert error == ""
        env, _ = node.cdi(ids)
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"  # the tenant's: it may raise it
        assert node.hook_config(ref)["HOOKCORE_COMPUTE_LIMIT_0"] == "30"  # the daemon's, read-only
