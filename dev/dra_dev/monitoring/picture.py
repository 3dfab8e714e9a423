"""A PNG of the dashboard's per-device panels, drawn from the panels' own queries.

The first two panels of the charts' dashboard (memory and compute per device: capacity,
allocated to claims, used) are queried from a Prometheus exactly as Grafana would send them
(`rules.as_promql`), and each device's latest values are drawn as grouped bars with Pillow.
tests/monitoring draws it from the Prometheus that scrapes its daemons; the README shows one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from dra_dev.monitoring.prometheus import Prometheus
from dra_dev.monitoring.rules import as_promql

COLOURS = {"capacity": (189, 195, 199), "allocated": (52, 120, 198), "used": (230, 126, 34)}
FALLBACK = [(39, 174, 96), (142, 68, 173), (192, 57, 43)]
GiB = 1 << 30


@dataclass(frozen=True)
class Bars:
    """One panel's latest values: per series name (capacity, allocated, used), per device."""

    title: str
    unit: str
    series: dict[str, dict[str, float]]

    @property
    def devices(self) -> list[str]:
        names = {d for values in self.series.values() for d in values}
        return sorted(names, key=lambda d: (len(d), d))


def panel_bars(prom: Prometheus, board: Mapping[str, Any], index: int, variables: Mapping[str, str]) -> Bars:
    """Panel `index` of `board`, each query's series by device (``node/device`` past one node)."""
    panel = board["panels"][index]
    found: dict[str, dict[str, tuple[str, float]]] = {}
    for target in panel["targets"]:
        name = target.get("legendFormat", target["refId"]).split()[-1]
        for s in prom.query(as_promql(target["expr"], variables)):
            m = s["metric"]
            found.setdefault(name, {})[f"{m.get('node', '')}/{m.get('device', '')}"] = (m.get("device", ""), float(s["value"][1]))
    nodes = {key.split("/", 1)[0] for values in found.values() for key in values}
    series = {name: {(key if len(nodes) > 1 else dev): v for key, (dev, v) in values.items()} for name, values in found.items()}
    return Bars(panel["title"], panel["fieldConfig"]["defaults"].get("unit", ""), series)


def _shown(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / GiB:.1f} GiB"
    if unit == "percent":
        return f"{value:.0f}%"
    return f"{value:g}"


def draw(panels: Sequence[Bars], out: Path, width: int = 1400) -> Path:
    """Each panel as horizontal grouped bars (one group per device), stacked vertically, to `out`."""
    font = ImageFont.load_default(size=15)
    title_font = ImageFont.load_default(size=20)
    bar_h, gap, label_w, top = 11, 10, 170, 46
    heights = []
    for p in panels:
        heights.append(top + len(p.devices) * (len(p.series) * bar_h + gap) + 40)
    image = Image.new("RGB", (width, sum(heights) + 10), "white")
    ink = ImageDraw.Draw(image)
    y0 = 5
    for p, h in zip(panels, heights, strict=True):
        ink.text((16, y0 + 8), p.title, fill="black", font=title_font)
        names = list(p.series)
        x = width - 20
        for i, name in reversed(list(enumerate(names))):  # the legend, right-aligned
            colour = COLOURS.get(name, FALLBACK[i % len(FALLBACK)])
            w = int(ink.textlength(name, font=font))
            x -= w
            ink.text((x, y0 + 12), name, fill="black", font=font)
            x -= 18
            ink.rectangle((x, y0 + 14, x + 12, y0 + 26), fill=colour)
            x -= 16
        peak = max((v for values in p.series.values() for v in values.values()), default=1.0) or 1.0
        scale = (width - label_w - 140) / peak
        y = y0 + top
        for dev in p.devices:
            ink.text((16, y + (len(names) * bar_h) / 2 - 9), dev, fill="black", font=font)
            for i, name in enumerate(names):
                value = p.series[name].get(dev)
                if value is not None:
                    colour = COLOURS.get(name, FALLBACK[i % len(FALLBACK)])
                    ink.rectangle((label_w, y, label_w + max(1, int(value * scale)), y + bar_h - 1), fill=colour)
                    ink.text((label_w + int(value * scale) + 6, y - 3), _shown(value, p.unit), fill=(90, 90, 90),
                             font=ImageFont.load_default(size=11))
                y += bar_h
            y += gap
        ink.line((label_w, y0 + top - 4, label_w, y), fill=(120, 120, 120))
        y0 += h
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, format="PNG", optimize=True)
    return out


def per_device_picture(prom: Prometheus, board: Mapping[str, Any], variables: Mapping[str, str], out: Path) -> list[Bars]:
    """The dashboard's first two panels (memory, compute per device) drawn to `out`; their data."""
    panels = [panel_bars(prom, board, i, variables) for i in (0, 1)]
    draw(panels, out)
    return panels
