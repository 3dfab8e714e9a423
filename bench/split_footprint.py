"""The runtime's footprint, to compare two layouts (issue 20: the runtime apart from the dev rig).

Two figures, each read from what a node runs rather than from the source tree:

- `image ARCHIVE`: the OCI archive `make image` wrote (dist/dra-hami-<version>.oci.tar): its
  size, its layers unpacked, the venv's site-packages (/opt/dra/lib/python3*/site-packages)
  and the distributions installed there (their *.dist-info), read from the layers' tars.
- `rss`: the node daemon's VmRSS once it is ready (registered with the kubelet harness and
  its slices published, /readyz 200) against an embedded control plane, for `dra run DRIVER`
  and the lean `python -m MODULE DRIVER`, a few runs each.

Run it with the interpreter of the checkout being measured, from that checkout, so its `dra` is
the one imported (this script imports no module of the checkout it lies in):

    .venv/bin/python bench/split_footprint.py image dist/dra-hami-0.1.0.oci.tar
    .venv/bin/python bench/split_footprint.py rss --lean-module dra._runtime.daemon   # after the split
    ../wt-before/.venv/bin/python bench/split_footprint.py rss --lean-module dra.daemon  # before it
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import statistics
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SITE = re.compile(r"^opt/dra/lib/python3[.\d]*/site-packages/")
DIST_INFO = re.compile(r"^opt/dra/lib/python3[.\d]*/site-packages/([^/]+)-([^-/]+)\.dist-info/METADATA$")


def _layers(archive: Path) -> Iterator[tuple[str, bytes]]:
    """(digest, the layer's tar, unpacked) for each layer of the archive's image, base first."""
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> bytes:
            f = tar.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
            if f is None:
                raise SystemExit(f"{archive} lacks {digest}")
            return f.read()

        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        for layer in manifest["layers"]:
            raw = blob(layer["digest"])
            yield layer["digest"], zlib.decompress(raw, wbits=47) if layer["mediaType"].endswith("gzip") else raw


def image_footprint(archive: Path) -> dict[str, Any]:
    layers: list[dict[str, Any]] = []
    site_files: dict[str, int] = {}  # path -> size (a later layer's copy wins; whiteouts drop it)
    for digest, data in _layers(archive):
        layers.append({"digest": digest[:19], "bytes": len(data)})
        with tarfile.open(fileobj=io.BytesIO(data)) as layer:
            for m in layer:
                name = m.name.removeprefix("./")
                base = name.rsplit("/", 1)[-1]
                if base.startswith(".wh."):
                    gone = name.rsplit("/", 1)[0] + "/" + base[4:] if "/" in name else base[4:]
                    for key in [k for k in site_files if k == gone or k.startswith(gone + "/")]:
                        del site_files[key]
                elif SITE.match(name) and m.isfile():
                    site_files[name] = m.size
    dists = sorted({f"{d.group(1)}=={d.group(2)}" for path in site_files if (d := DIST_INFO.match(path))},
                   key=str.lower)
    return {
        "archive": str(archive),
        "archive_bytes": archive.stat().st_size,
        "layers_unpacked_bytes": sum(la["bytes"] for la in layers),
        "layers": layers,
        "site_packages_bytes": sum(site_files.values()),
        "site_packages_files": len(site_files),
        "distributions": dists,
    }


@contextlib.contextmanager
def control_plane(kubeconfig: str | None) -> Iterator[Path]:
    if kubeconfig:
        yield Path(kubeconfig)
        return
    try:
        from dra_dev.cluster.controlplane import running  # after the split: the dev rig
    except ImportError:
        from dra.cluster.controlplane import running  # type: ignore[no-redef,import-not-found]  # before it
    with tempfile.TemporaryDirectory(prefix="dra-fp-cp-") as d, running(Path(d)) as cp:
        yield cp.kubeconfig


def vm_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def create_node(api: Any, name: str) -> None:
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources,
                                             "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                                             "message": "footprint bench", "lastHeartbeatTime": None}]}})


def one_rss(kubeconfig: Path, driver: str, module: str, extra: list[str], settle: float) -> tuple[int, int]:
    """Start the daemon, wait until it is registered and ready, let it settle, read its RSS."""
    from kubernetes import client, config

    from dra.testing.daemon import DaemonProcess
    from dra.testing.kubelet import KubeletHarness

    api = config.new_client_from_config(config_file=str(kubeconfig))
    node = f"fp-{os.urandom(3).hex()}"
    create_node(api, node)
    with tempfile.TemporaryDirectory(prefix="dra-fp-", dir="/tmp") as wd:
        daemon = DaemonProcess(driver, node, kubeconfig, Path(wd), args=["--log-level", "warning", *extra], module=module).start()
        kubelet = KubeletHarness(daemon.registrar_dir)
        try:
            kubelet.wait_for_plugin(None, timeout=90)
            daemon.wait_http("/readyz", timeout=90)
            time.sleep(settle)
            return vm_kib(daemon.pid)
        finally:
            kubelet.close()
            daemon.stop()
            with contextlib.suppress(Exception):
                client.CoreV1Api(api).delete_node(node)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    img = sub.add_parser("image", help="the image's sizes and distributions")
    img.add_argument("archive", type=Path)
    rss = sub.add_parser("rss", help="the daemon's VmRSS once ready")
    rss.add_argument("--kubeconfig", help="a running control plane (default: start an embedded one)")
    rss.add_argument("--lean-module", required=True, help="dra._runtime.daemon (after the split) or dra.daemon (before)")
    rss.add_argument("--runs", type=int, default=3)
    rss.add_argument("--settle", type=float, default=3.0, help="seconds between ready and the reading")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    if args.what == "image":
        out: Any = image_footprint(args.archive)
        mib = 1 << 20
        print(f"{args.archive}: archive {out['archive_bytes'] / mib:.1f} MiB, layers unpacked "
              f"{out['layers_unpacked_bytes'] / mib:.1f} MiB ({len(out['layers'])} layers), "
              f"site-packages {out['site_packages_bytes'] / mib:.1f} MiB in {out['site_packages_files']} files")
        for la in out["layers"]:
            print(f"  layer {la['digest']}  {la['bytes'] / mib:8.1f} MiB")
        print(f"  {len(out['distributions'])} distributions: {' '.join(out['distributions'])}")
    else:
        import dra

        cases = [("example", []), ("hami-core-gpu", ["--fake", "h200x8"])]
        rows: list[dict[str, Any]] = []
        with control_plane(args.kubeconfig) as kubeconfig:
            for driver, extra in cases:
                for module in ("dra.cli", args.lean_module):
                    readings = [one_rss(kubeconfig, driver, module, extra, args.settle) for _ in range(args.runs)]
                    how = f"dra run {driver}" if module == "dra.cli" else f"python -m {module} {driver}"
                    rows.append({"command": f"{how} {' '.join(extra)}".strip(), "rss_kib": [r for r, _ in readings],
                                 "hwm_kib": [h for _, h in readings]})
        print(f"\nDaemon VmRSS once ready (dra from {Path(dra.__file__).parent}; {os.cpu_count()} CPUs)")
        print(f"{'command':<58} {'RSS MiB (runs)':<24} {'median':>7} {'peak (VmHWM) median':>20}")
        for r in rows:
            each = " ".join(f"{v / 1024:.1f}" for v in r["rss_kib"])
            print(f"{r['command']:<58} {each:<24} {statistics.median(r['rss_kib']) / 1024:>7.1f} "
                  f"{statistics.median(r['hwm_kib']) / 1024:>20.1f}")
        out = {"dra": str(Path(dra.__file__).parent), "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
