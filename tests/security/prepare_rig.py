"""A fake-H200 node's real prepare path and the webhook's validation, for the claim-config tests
(test_policy_loosening.py, test_config_*.py): the real NVIDIA driver on stub NVML, the real
checkpoint, hook config and CDI spec; claims as kubelet sends them, with one or more requests."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from driver_helpers import fake_drivers, isolated_env

import dra
from dra._runtime import registry
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra.testing.cdi import apply_cdi
from dra.testing.claims import RecordedClaims, claim_dict, opaque, result
from dra.webhook import vendors
from dra.webhook.review import Admission
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver

GPU = "hami-core-gpu.project-hami.io"
CLASS = "hami-core-gpu.project-hami.io"
STUB_ENV = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NVML_DRIVER", "HOOKCORE_STUB_NVML_CUDA",
            "HOOKCORE_STUB_NVML_FAIL", "HOOKCORE_STUB_NVML_EVENTS")

__all__ = ["CLASS", "GPU", "Classes", "Node", "cfg", "claim_review", "nodes", "opaque", "result", "validate"]


def cfg(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "hami-core-gpu.project-hami.io/v1alpha1", "kind": "GpuConfig", **fields}


ONE_GPU = (result("hami-gpu-0", driver=GPU, share_id="s1", cores="1", memory="1Gi"),)


class Node:
    """A fake-H200 node's prepare path: the real driver, checkpoint, hook config and CDI spec."""

    def __init__(self, root: Path, driver: HamiCoreGpuDriver, allow: bool,
                 config_defaults: Mapping[str, Any] | None = None) -> None:
        self.root, self.claims, self.driver = root, RecordedClaims(), driver
        cp = Checkpoint(root / "state", boot_id="b")
        self.prep = ClaimPreparer(driver, self.claims, "node-a", cp, CDISpecs(driver.cdi_kind, root / "cdi"),
                                  hooks=ClaimHooks(cp.state_dir, HookDir(root / "hook-dir")),
                                  allow_claim_loosening=allow, config_defaults=config_defaults)

    def prepare(self, *config: dict[str, Any], results: Sequence[dict[str, Any]] = ONE_GPU) -> tuple[str, dra.ClaimRef]:
        """Prepare one claim of `results` (default: 1 core and 1Gi of hami-gpu-0, request "gpu")
        with `config` (its status.allocation.devices.config); the error ('' when prepared)."""
        c = self.claims.add(claim_dict("c", results=list(results), config=list(config)))
        ref = dra.ClaimRef(c.uid, c.namespace, c.name)
        return self.prep.prepare_claims([ref])[ref.uid].error, ref

    def hook_config(self, ref: dra.ClaimRef) -> dict[str, str]:
        text = (self.root / "state" / "hooks" / ref.uid / "config").read_text()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))

    def env(self, ref: dra.ClaimRef) -> dict[str, str]:
        (out,) = [o for o in [self.prep.checkpoint.get(ref.uid)] if o is not None]
        ids = [i for d in out.devices for i in d.cdi_ids]
        return apply_cdi(self.root / "cdi", ids)[0]

    def nothing_left(self, ref: dra.ClaimRef) -> bool:
        return self.prep.checkpoint.get(ref.uid) is None and not (self.root / "state" / "hooks" / ref.uid).exists()


@contextlib.contextmanager
def nodes(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """`build(allow=False, settings=None, config_defaults=None)` makes a fresh node each call; an
    MPS root (short: its control socket must fit a unix socket path) is every node's."""
    mps_root = Path(tempfile.mkdtemp(prefix="mps", dir="/tmp"))
    with isolated_env(STUB_ENV):
        made = fake_drivers(HamiCoreGpuDriver, "h200x8")
        make = next(made)
        built: list[Node] = []

        def build(allow: bool = False, settings: Mapping[str, str] | None = None,
                  config_defaults: Mapping[str, Any] | None = None) -> Node:
            driver = make(settings={"health": "off", "mpsRoot": str(mps_root / str(len(built))), **(settings or {})})
            built.append(Node(tmp_path / f"n{len(built)}", driver, allow, config_defaults))
            return built[-1]

        try:
            yield build
        finally:
            for n in built:
                if n.driver.mps is not None:
                    n.driver.mps.stop_all()
            with contextlib.suppress(StopIteration):
                next(made)
            shutil.rmtree(mps_root, ignore_errors=True)


# --- the webhook: the same rule at `kubectl apply` ---------------------------------------------

class Classes:
    """DeviceClasses' opaque configs by class name, as the webhook reads them."""

    def __init__(self, configs: dict[str, list[dict[str, Any]]]) -> None:
        self.configs = configs

    def opaque(self, class_name: str) -> list[dict[str, Any]] | None:
        return self.configs.get(class_name)


def claim_review(config: list[dict[str, Any]], requests: Mapping[str, str] | None = None,
                 applies: Sequence[str] | None = None) -> dict[str, Any]:
    """An AdmissionReview of a ResourceClaim with `requests` (name -> DeviceClass; default one
    request "gpu" of the driver's class) and one FromClaim config per parameters of `config`
    (for `applies`, default every request)."""
    requests = requests or {"gpu": CLASS}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "t"},
             "spec": {"devices": {"requests": [{"name": n, "exactly": {"deviceClassName": c}} for n, c in requests.items()],
                                  "config": [{"requests": list(applies if applies is not None else requests),
                                              "opaque": {"driver": GPU, "parameters": p}} for p in config]}}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"kind": "ResourceClaim"}, "operation": "CREATE", "namespace": "t",
                        "object": claim}}


def validate(review: dict[str, Any], classes: dict[str, list[dict[str, Any]]] | None = None,
             allow: bool = False) -> dict[str, Any]:
    """The webhook's /validate response to `review`; `classes`: class name -> its GpuConfig parameters."""
    known = Classes({name: [{"driver": GPU, "parameters": p} for p in ps] for name, ps in (classes or {}).items()})
    admission = Admission(vendors.load(None), drivers=registry.driver_classes(), classes=known,
                          allow_claim_loosening=allow)
    return dict(admission.validate(review)["response"])
