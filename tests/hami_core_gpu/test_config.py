"""The opaque config GpuConfig, decoded strictly by the framework from the driver class alone."""

from __future__ import annotations

from typing import Any

import pytest

import dra
from drivers.hami_core_gpu.config import API_VERSION, GpuConfig
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver


def params(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GpuConfig", **fields}


def test_a_config_decodes_to_its_fields() -> None:
    assert dra.decode_config(HamiCoreGpuDriver, params(preload="env", computeLimit=False)) == GpuConfig("env", False)
    assert dra.decode_config(HamiCoreGpuDriver, params()) == GpuConfig()
    assert dra.decode_config(HamiCoreGpuDriver, params(computeMode="strict", fullLoadClockMhz=1500)) == GpuConfig(
        compute_mode="strict", full_load_clock_mhz=1500)
    for given, want in ((0.45, 0.45), (1, 1.0), (0, 0.0), (0.005, 0.005)):  # a JSON integer is a number too
        assert dra.decode_config(HamiCoreGpuDriver, params(computeMode="strict", clockElasticity=given)) == GpuConfig(
            compute_mode="strict", clock_elasticity=want)


@pytest.mark.parametrize("bad,error", [
    (params(preload="mount"), "preload"),
    (params(computeLimit="no"), "computeLimit"),
    (params(computelimit=False), "did you mean 'computeLimit'"),
    (params(memoryLimit="4Gi"), "unknown field"),
    ({**params(), "kind": "GPUConfig"}, "kind"),
    (params(computeMode="throughput"), "computeMode"),
    (params(fullLoadClockMhz=1500), "fullLoadClockMhz applies to computeMode: strict only"),
    (params(computeMode="strict", fullLoadClockMhz=0), r"fullLoadClockMhz must be 1..99999 MHz, not 0"),
    (params(computeMode="strict", fullLoadClockMhz="1500"), "fullLoadClockMhz"),
    (params(clockElasticity=0.45), "clockElasticity applies to computeMode: strict only"),
    (params(computeMode="share", clockElasticity=0.45), "clockElasticity applies to computeMode: strict only"),
    (params(computeMode="strict", clockElasticity=1.5), r"clockElasticity must be a number from 0 to 1 with at most 3"
                                                        r" decimals \(H100: 0.5\), not 1.5"),
    (params(computeMode="strict", clockElasticity=-0.1), "clockElasticity must be a number from 0 to 1"),
    (params(computeMode="strict", clockElasticity=0.4567), r"with at most 3 decimals .*not 0.4567"),
    (params(computeMode="strict", clockElasticity=float("nan")), "clockElasticity must be a number from 0 to 1"),
    (params(computeMode="strict", clockElasticity="0.45"), r"clockElasticity.*expected number, got string"),
    (params(computeMode="strict", clockElasticity=True), r"clockElasticity.*expected number, got boolean"),
    ({**params(), "apiVersion": "resource.nvidia.com/v1beta1"}, "apiVersion"),
])
def test_bad_configs_are_refused_naming_the_field(bad: dict[str, Any], error: str) -> None:
    with pytest.raises(dra.ConfigError, match=error):
        dra.decode_config(HamiCoreGpuDriver, bad)


def test_validate_catches_what_the_types_cannot() -> None:
    with pytest.raises(ValueError, match="preload must be one of"):
        GpuConfig(preload="ld").validate()  # type: ignore[arg-type]  # the point: a value the type forbids
