"""Helpers for a driver's fake-device backend: the ``--fake PROFILE_OR_FILE`` grammar every
bundled driver shares, so a profile or a YAML file is read, and its mistakes named, one way.

A driver keeps its own models, entry keys and stub format; these do the parts that are the
same for every vendor: telling a profile (``<model>x<count>``) from a file, reading the file,
the top level of the document (one list of devices), per-entry key checks, an entry's model and
the fields it sets over the model's, an HGX/Atlas-like PCIe layout and the PCI address grammar,
and the files a fake backend keeps while it runs (`FakeTree`). Every error is a
`FakeDevicesError` that names the file (or profile) and what to change.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from dra.driver import Mount, quantity_to_int
from dra.topology import build_fake_sysfs

T = TypeVar("T")

_PROFILE = re.compile(r"^(?P<model>[a-z0-9-]+?)x(?P<count>[0-9]+)$")
_PCI_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_PCIE_ROOT = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")


class FakeDevicesError(ValueError):
    """A fake-device profile or file that cannot be used; says what to change."""


STUB_DIR_ENV = "DRA_FAKE_STUB_DIR"


def stub_dir(built: Path) -> Path:
    """Where the fake's stub vendor libraries are read from and mounted into claims (`built`:
    hookcore's stub dir). A daemon in a container names them in CDI specs that the host's runtime
    reads, so with `$DRA_FAKE_STUB_DIR` (a host directory mounted at the same path) they are
    copied there first, into a dir named by their content (never rewritten under a running claim)."""
    target = os.environ.get(STUB_DIR_ENV)
    if not target:
        return built
    files = sorted(p for p in built.iterdir() if p.is_file())
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()[:16]
    dest = Path(target) / digest
    if not dest.is_dir():
        scratch = Path(target) / f".{digest}.{os.getpid()}"
        try:
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            for p in files:
                shutil.copy2(p, scratch / p.name)
        except OSError as exc:
            raise FakeDevicesError(f"cannot copy the fake's stub libraries into ${STUB_DIR_ENV}={target}: {exc}; "
                                   "mount a writable host directory there (at the same path) or unset it") from exc
        try:
            os.rename(scratch, dest)
        except OSError:  # another daemon got there first: its copy is the same
            shutil.rmtree(scratch, ignore_errors=True)
    return dest


def load(spec: str, node: str, profile: Callable[[str, str], T], from_document: Callable[[Any, str, str], T]) -> T:
    """`profile(spec, node)` for a profile name, `from_document(doc, node, path)` for the path
    of a YAML file (anything with a `/` or a .yaml/.yml suffix)."""
    if "/" in spec or spec.endswith((".yaml", ".yml")):
        import yaml

        path = Path(spec)
        try:
            doc = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise FakeDevicesError(f"cannot read fake-device file {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise FakeDevicesError(f"fake-device file {path} is not YAML: {exc}") from None
        return from_document(doc, node, str(path))
    return profile(spec, node)


def parse_profile(name: str, models: Iterable[str], example: str) -> tuple[str, int]:
    """(model, count) of a ``<model>x<count>`` profile whose model is one of `models`."""
    known = sorted(models)
    m = _PROFILE.match(name)
    if not m or m["model"] not in known:
        raise FakeDevicesError(
            f"unknown fake-device profile {name!r}: give <model>x<count> with a model of {known} "
            f"(e.g. {example}), or the path of a YAML file"
        )
    return m["model"], int(m["count"])


def pci_layout(position: int, buses: Sequence[int], roots: Sequence[int]) -> tuple[str, str, int]:
    """(PCI bus id, PCIe root, NUMA node) of the device at `position` on a board with one device
    per bus in `buses` behind the root at the same index in `roots`, the first half on NUMA node 0;
    boards past the first repeat it in the next PCI domain."""
    domain, slot = divmod(position, len(buses))
    return f"{domain:04x}:{buses[slot]:02x}:00.0", f"pci{domain:04x}:{roots[slot]:02x}", 0 if slot < len(buses) // 2 else 1


def document_entries(doc: Any, source: str, key: str, others: Sequence[str], most: int, noun: str) -> list[Any]:
    """The device list under `key` of a fake-device document whose other top-level keys may be
    `others`; at most `most` entries (`noun` names them in errors, e.g. "GPUs")."""
    if not isinstance(doc, dict):
        raise FakeDevicesError(f"{source}: expected a mapping with `{key}:`, got {type(doc).__name__}")
    known = (key, *others)
    unknown = set(doc) - set(known)
    if unknown:
        raise FakeDevicesError(f"{source}: unknown keys {sorted(unknown)} (known: {', '.join(known)})")
    entries = doc.get(key)
    if not isinstance(entries, list) or not entries:
        raise FakeDevicesError(f"{source}: `{key}:` must be a non-empty list")
    if len(entries) > most:
        raise FakeDevicesError(f"{source}: at most {most} {noun}, got {len(entries)}")
    return entries


def entry_mapping(entry: Any, where: str, known: Iterable[str]) -> dict[str, Any]:
    """One device entry, a mapping of only `known` keys."""
    if not isinstance(entry, dict):
        raise FakeDevicesError(f"{where}: expected a mapping")
    keys = set(known)
    unknown = set(entry) - keys
    if unknown:
        raise FakeDevicesError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(keys)})")
    return entry


def entry_model(entry: Mapping[str, Any], where: str, models: Iterable[str], default: str,
                required: Sequence[str]) -> str:
    """The model whose values an entry starts from: its ``model:`` (any case; one of `models`), or
    `default` where the entry has none and gives at least the `required` keys (a name and the
    memory) itself."""
    known = sorted(models)
    name = None if entry.get("model") is None else str(entry["model"]).lower()
    if name is not None and name not in known:
        raise FakeDevicesError(f"{where}: unknown model {name!r}; known: {known}")
    if name is None and not set(required) <= set(entry):
        raise FakeDevicesError(f"{where}: give `model:` or at least {' and '.join(f'`{k}:`' for k in required)}")
    return name or default


def int_field(entry: Mapping[str, Any], key: str, where: str, lo: int, hi: int) -> int | None:
    """The entry's integer `key` in `lo`..`hi` (not a bool), None where it is absent."""
    if key not in entry:
        return None
    value = entry[key]
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise FakeDevicesError(f"{where}: {key} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def entry_changes(entry: Mapping[str, Any], where: str, strings: Mapping[str, str],
                  ints: Mapping[str, tuple[str, int, int]], memory_example: str) -> dict[str, Any]:
    """What an entry sets over its model's device, by attribute (``dataclasses.replace``'s
    arguments): each key of `strings` as text, each key of `ints` as an integer in its range
    (`int_field`), and ``memory`` as a quantity in bytes (`memory_quantity`)."""
    changes: dict[str, Any] = {attr: str(entry[key]) for key, attr in strings.items() if key in entry}
    for key, (attr, lo, hi) in ints.items():
        value = int_field(entry, key, where, lo, hi)
        if value is not None:
            changes[attr] = value
    if "memory" in entry:
        changes["memory"] = memory_quantity(entry, where, example=memory_example)
    return changes


def check_unique(devices: Sequence[Any], attributes: Iterable[str], source: str, noun: str) -> None:
    """No two of `devices` share a value of any of `attributes` (a UUID, a bus id, an index)."""
    for what in attributes:
        values = [getattr(d, what) for d in devices]
        if len(set(values)) != len(values):
            raise FakeDevicesError(f"{source}: two {noun} share one {what}: {values}")


def memory_quantity(entry: Mapping[str, Any], where: str, example: str) -> int:
    """The entry's ``memory`` (a quantity such as `example`) in bytes."""
    try:
        return quantity_to_int(str(entry["memory"]))
    except ValueError:
        raise FakeDevicesError(f"{where}: memory {entry['memory']!r} is not a quantity (e.g. {example})") from None


def check_pci_address(where: str, bus_id: str, pcie_root: str, bus_example: str, root_example: str) -> None:
    """`bus_id` and `pcie_root` as sysfs spells them (``0000:3b:00.0``, ``pci0000:3a``)."""
    if not _PCI_BUS_ID.fullmatch(bus_id):
        raise FakeDevicesError(f"{where}: pciBusID {bus_id!r} must look like {bus_example} (lower-case hex)")
    if not _PCIE_ROOT.fullmatch(pcie_root):
        raise FakeDevicesError(f"{where}: pcieRoot {pcie_root!r} must look like {root_example}")


class FakeTree:
    """The files a fake backend keeps while it runs in this process, in a scratch directory of its
    own (`dir`, removed at `close`): a sysfs with the devices' PCIe roots and NUMA nodes
    (`topology.build_fake_sysfs`; `sysfs`) and the state file the stub vendor library reads run-time
    changes from (`state_file`: lines the backend appends, e.g. a device's health). A state file
    the caller names in `state_env` wins, so every process of one fake node (a daemon, a restarted
    one, its workloads) shares one. Refuses a stub library that is not built."""

    def __init__(self, prefix: str, stub: Path, what: str, pci: Iterable[tuple[str, str, int | None]],
                 state_env: str, state_name: str) -> None:
        if not stub.exists():
            raise FakeDevicesError(f"the stub {what} library {stub} is not built: run `make -C hookcore` "
                                   "(or reinstall the package)")
        self.stub = stub
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.sysfs = self.dir / "sys"
        build_fake_sysfs(self.sysfs, list(pci))
        self.state_file = Path(os.environ.setdefault(state_env, str(self.dir / state_name)))
        self.state_file.touch()

    def shared_dir(self, name: str) -> Path:
        """A directory `name` of the fake node that claims' containers may mount: under
        ``$DRA_FAKE_STUB_DIR`` (a host directory at the same path, `stub_dir`) where it is set (a
        daemon in a container: its own dirs are not the host's, and CDI specs name host paths),
        which keeps it past `close` for a restarted daemon; else in the scratch dir."""
        target = os.environ.get(STUB_DIR_ENV)
        path = (Path(target) if target else self.dir) / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def append_state(self, *lines: str) -> None:
        """Lines for the stub to read at its next call (one change each)."""
        with self.state_file.open("a") as f:
            f.write("".join(f"{line}\n" for line in lines))

    def stub_mounts(self, names: Iterable[str], directory: str = "/usr/lib") -> tuple[Mount, ...]:
        """The stub libraries `names` (beside `stub`) for a claim's containers, mounted into
        `directory` (where the loader looks by default: no ``LD_LIBRARY_PATH``, which another
        driver's CDI device in the same container may set), each by its real path (a soname link
        resolved)."""
        return tuple(Mount(os.path.realpath(self.stub.parent / name), f"{directory}/{name}") for name in names)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
