"""The node's two local images, built from this checkout and imported into containerd.

- `localhost/dra-pause:local`: the pod sandbox (`pause.c`, static), pinned as containerd's
  sandbox image so kubelet never pulls one.
- `dra-workload:local` (`docker.io/library/dra-workload:local` once normalized): the CUDA
  workload program (`hookcore/workload/cuda_workload.c`, a dynamic ELF that dlopens
  `libcuda.so.1`), the stub `libcuda.so.1` (no GPU here), the HIP and MLU workload programs
  (`hip_workload`, `mlu_workload`: their stub runtimes come with a claim, as the DCU and MLU fakes'
  CDI mounts), and the shared libraries the programs, the stubs and the hook libraries need
  (copied from this host, found with `ldd`). The hook libraries are not in the image: the claim's
  CDI edits mount them, as on a real node.

Pods name them with `imagePullPolicy: Never`.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dra.errors import UserError
from dra_dev.node.oci import ImageSpec, normalize_reference, write_archive

PAUSE_IMAGE = "localhost/dra-pause:local"
WORKLOAD_IMAGE = "dra-workload:local"
WORKLOAD_BINARY = "/usr/local/bin/cuda_workload"
OTHER_WORKLOADS = ("hip_workload", "mlu_workload")
"""Further programs of hookcore/workload in the image's /usr/local/bin (the DCU's and the MLU's)."""
# The stub runtimes the DCU and MLU fakes mount into a claim's containers: their libraries come from the image.
MOUNTED_STUBS = ("libamdhip64.so.6", "libcndev.so", "libcnrt.so")
# Where the image's stub driver lives: a directory the dynamic loader searches by default.
STUB_LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"

_HERE = Path(__file__).resolve().parent
_LDD_LINE = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)\s*$")


@dataclass(frozen=True)
class BuiltImage:
    reference: str  # normalized, as containerd and kubelet name it
    archive: Path
    digest: str


def _hookcore_dir() -> Path:
    spec = importlib.util.find_spec("hookcore")
    if spec is None or spec.origin is None:
        raise UserError("the hookcore package is not importable; install the project with pip install -e '.[dev]'.")
    return Path(spec.origin).resolve().parent


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise UserError("no C compiler ('cc' or 'gcc') on PATH; it builds the node's pause and workload "
                        "programs. Install gcc (Debian: apt-get install -y gcc libc6-dev).")
    return cc


def _compile(args: list[str], what: str) -> None:
    proc = subprocess.run([_cc(), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"compiling the {what} failed (cc {' '.join(args)}):\n{proc.stderr.strip()}")


def shared_libraries(binaries: Iterable[Path]) -> dict[str, Path]:
    """Every shared library (and the dynamic loader) the binaries need: path in image -> host file."""
    found: dict[str, Path] = {}
    for binary in binaries:
        proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
        if proc.returncode != 0:
            if "not a dynamic executable" in proc.stdout + proc.stderr:
                continue
            raise UserError(f"ldd {binary} failed: {(proc.stdout + proc.stderr).strip()}")
        for line in proc.stdout.splitlines():
            if "not found" in line:
                raise UserError(f"{binary} needs a library this host lacks: {line.strip()}")
            m = _LDD_LINE.match(line)
            if m:
                found[m.group(1)] = Path(m.group(1)).resolve()
    return found


def build_pause(out: Path) -> BuiltImage:
    binary = out / "pause"
    _compile(["-static", "-O2", "-Wall", "-o", str(binary), str(_HERE / "pause.c")], "pause program")
    archive = out / "pause.oci.tar"
    digest = write_archive(ImageSpec(PAUSE_IMAGE, {"/pause": binary}, ["/pause"]), archive)
    return BuiltImage(normalize_reference(PAUSE_IMAGE), archive, digest)


def workload_source(name: str = "cuda_workload") -> Path:
    """hookcore's workload program `name` (the CUDA one reaches the driver as the CUDA runtime does)."""
    source = _hookcore_dir() / "workload" / f"{name}.c"
    if not source.is_file():
        raise UserError(f"the workload program {source} is missing from this checkout; it goes into dra-workload:local.")
    return source


def build_workload(out: Path) -> BuiltImage:
    hook = _hookcore_dir()
    stub = hook / "build" / "stub" / "libcuda.so.1"
    if not stub.is_file():
        raise UserError(f"the stub CUDA driver {stub} is not built; run `make -C {hook}` "
                        "(pip install -e '.[dev]' builds it too).")
    source = workload_source()
    binary = out / "cuda_workload"
    _compile(["-O2", "-std=gnu11", "-Wall", "-o", str(binary), str(source), "-ldl"], f"workload program {source.name}")
    files = {WORKLOAD_BINARY: binary, STUB_LIBCUDA: stub}
    for name in OTHER_WORKLOADS:
        other = workload_source(name)
        files[f"/usr/local/bin/{name}"] = out / name
        _compile(["-O2", "-std=gnu11", "-Wall", "-o", str(out / name), str(other), "-ldl"], f"workload program {other.name}")
    # The hook libraries and the fakes' stub runtimes are mounted by CDI, but they run in this
    # image's libc: carry their libraries too.
    hook_libs = sorted((hook / "build").glob("lib*.so"))
    mounted = [p for p in (hook / "build" / "stub" / n for n in MOUNTED_STUBS) if p.is_file()]
    files.update(shared_libraries([*files.values(), *hook_libs, *mounted]))
    archive = out / "workload.oci.tar"
    labels = {"dev.dra.workload.source": source.name}
    digest = write_archive(ImageSpec(WORKLOAD_IMAGE, files, [WORKLOAD_BINARY], labels=labels), archive)
    return BuiltImage(normalize_reference(WORKLOAD_IMAGE), archive, digest)


def build_images(out: Path) -> list[BuiltImage]:
    out.mkdir(parents=True, exist_ok=True)
    return [build_pause(out), build_workload(out)]


def import_images(ctr: Path, address: Path, images: Iterable[BuiltImage]) -> None:
    """Import archives into containerd's CRI namespace (`k8s.io`), where kubelet sees them."""
    for image in images:
        proc = subprocess.run([str(ctr), "--address", str(address), "--namespace", "k8s.io", "images", "import",
                               "--local", str(image.archive)], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise UserError(f"importing {image.reference} into containerd failed: "
                            f"{(proc.stdout + proc.stderr).strip()}")
