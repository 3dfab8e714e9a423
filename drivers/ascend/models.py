"""HAMi's Ascend model names, read from the one table both sides use: the ascend entry of the
admission webhook's vendor mapping (``dra/webhook/vendors.yaml``, shipped in the ``dra``
package). Its ``models`` list HAMi's resource names (``huawei.com/Ascend310P``) with the chip
names DCMI reports for them (``310P3``); this driver publishes the model as ``productName``, the
attribute the webhook's selectors name, so a HAMi pod's claim finds the chip it means.

The file is read as data (the import contract keeps this driver off ``dra.webhook``'s code):
only each model's ``name`` and ``chips``. A chip no model lists keeps its DCMI name
(``Ascend`` + chip name).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from typing import Any

import yaml

VENDOR = "ascend"
TABLE = ("webhook", "vendors.yaml")  # under the dra package


@functools.cache
def chip_models() -> Mapping[str, str]:
    """DCMI chip name -> HAMi model name, from the shipped table."""
    text = resources.files("dra").joinpath(*TABLE).read_text()
    return parse(yaml.safe_load(text))


def parse(raw: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for vendor in (raw or {}).get("vendors") or []:
        if not isinstance(vendor, Mapping) or vendor.get("name") != VENDOR:
            continue
        for model in vendor.get("models") or []:
            if isinstance(model, Mapping):
                for chip in model.get("chips") or []:
                    out[str(chip)] = str(model["name"])
    return out


def model_of(chip_type: str, chip_name: str) -> str:
    """What the driver publishes as ``productName``: HAMi's model for the chip, else its DCMI name."""
    return chip_models().get(chip_name, f"{chip_type}{chip_name}")
