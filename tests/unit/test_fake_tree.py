"""dra.fakes' entry helpers and FakeTree: what the vendor fakes share (each vendor's own models,
keys and stub lines are tested in its driver tests)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra import Mount, fakes, topology
from dra.fakes import FakeDevicesError

MODELS = {"big": 1, "small": 2}


def test_entry_model_is_the_named_one_in_any_case_or_the_default_for_an_entry_that_says_enough() -> None:
    assert fakes.entry_model({"model": "BIG"}, "w", MODELS, "small", ("name", "memory")) == "big"
    assert fakes.entry_model({"name": "X", "memory": "1Gi"}, "w", MODELS, "small", ("name", "memory")) == "small"
    with pytest.raises(FakeDevicesError, match=r"^f: devs\[0\]: unknown model 'huge'; known: \['big', 'small'\]$"):
        fakes.entry_model({"model": "huge"}, "f: devs[0]", MODELS, "small", ("name", "memory"))
    with pytest.raises(FakeDevicesError, match=r"^w: give `model:` or at least `chipName:` and `memory:`$"):
        fakes.entry_model({"chipName": "X"}, "w", MODELS, "small", ("chipName", "memory"))


@pytest.mark.parametrize("value", [True, "3", 3.0, -1, 8])
def test_int_field_refuses_what_is_not_an_integer_in_range(value: object) -> None:
    with pytest.raises(FakeDevicesError, match=rf"^w: chip must be an integer in 0\.\.7, got {value!r}$"):
        fakes.int_field({"chip": value}, "chip", "w", 0, 7)


def test_entry_changes_are_the_keys_the_entry_sets_by_attribute() -> None:
    strings, ints = {"uuid": "uuid", "pciBusID": "pci_bus_id"}, {"numaNode": ("numa_node", 0, 1023), "cores": ("cores", 1, 64)}
    assert fakes.entry_changes({}, "w", strings, ints, "64Gi") == {}
    got = fakes.entry_changes({"uuid": 12, "numaNode": 0, "memory": "2Gi", "other": 1}, "w", strings, ints, "64Gi")
    assert got == {"uuid": "12", "numa_node": 0, "memory": 2 << 30}
    with pytest.raises(FakeDevicesError, match=r"^w: cores must be an integer in 1\.\.64, got 0$"):
        fakes.entry_changes({"cores": 0}, "w", strings, ints, "64Gi")
    with pytest.raises(FakeDevicesError, match=r"^w: memory 'lots' is not a quantity \(e\.g\. 48Gi\)$"):
        fakes.entry_changes({"memory": "lots"}, "w", strings, ints, "48Gi")


def _tree(tmp_path: Path) -> fakes.FakeTree:
    stub = tmp_path / "stubs" / "libtoy.so"
    stub.parent.mkdir(exist_ok=True)
    stub.write_bytes(b"\x7fELF")
    (stub.parent / "libtoyrt.so.1").write_bytes(b"\x7fELF")
    if not (stub.parent / "libtoyrt.so").is_symlink():
        (stub.parent / "libtoyrt.so").symlink_to("libtoyrt.so.1")
    return fakes.FakeTree("toy-fake-", stub, "TOY", [("0000:3b:00.0", "pci0000:3a", 1)], "DRA_TEST_TOY_STATE", "toy-state")


def test_a_fake_tree_lays_out_the_sysfs_and_a_state_file_and_close_removes_them(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRA_TEST_TOY_STATE", "")  # recorded, so the value the tree sets is undone after the test
    monkeypatch.delenv("DRA_TEST_TOY_STATE")
    tree = _tree(tmp_path)
    try:
        assert tree.dir.name.startswith("toy-fake-") and tree.sysfs == tree.dir / "sys"
        assert topology.pcie_root(tree.sysfs, "0000:3b:00.0") == "pci0000:3a"
        assert topology.numa_node(tree.sysfs, "0000:3b:00.0") == 1
        assert tree.state_file == tree.dir / "toy-state" and os.environ["DRA_TEST_TOY_STATE"] == str(tree.state_file)
        tree.append_state("health a 1", "driver a 4")
        tree.append_state("lost b")
        assert tree.state_file.read_text() == "health a 1\ndriver a 4\nlost b\n"
        assert tree.stub_mounts(["libtoyrt.so"], "/usr/lib") == (
            Mount(str((tmp_path / "stubs" / "libtoyrt.so.1").resolve()), "/usr/lib/libtoyrt.so"),)
    finally:
        tree.close()
    assert not tree.dir.exists()


def test_a_state_file_the_caller_names_is_shared_and_outlives_the_tree(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "node-state"
    monkeypatch.setenv("DRA_TEST_TOY_STATE", str(shared))
    tree = _tree(tmp_path)
    tree.append_state("health a 2")
    tree.close()
    assert shared.read_text() == "health a 2\n"


def test_a_stub_that_is_not_built_is_refused_naming_the_build_step(tmp_path: Path) -> None:
    with pytest.raises(FakeDevicesError, match=r"^the stub TOY library .*/libtoy\.so is not built: run `make -C hookcore`"):
        fakes.FakeTree("toy-fake-", tmp_path / "libtoy.so", "TOY", [], "DRA_TEST_TOY_STATE", "toy-state")


def test_a_shared_dir_is_on_the_host_dir_a_daemon_in_a_pod_names_and_outlives_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRA_TEST_TOY_STATE", str(tmp_path / "state"))
    monkeypatch.delenv(fakes.STUB_DIR_ENV, raising=False)
    local = _tree(tmp_path)
    assert local.shared_dir("table") == local.dir / "table" and (local.dir / "table").is_dir()
    local.close()
    monkeypatch.setenv(fakes.STUB_DIR_ENV, str(tmp_path / "host"))
    in_pod = _tree(tmp_path)
    shared = in_pod.shared_dir("table")
    assert shared == tmp_path / "host" / "table" and shared.is_dir()
    in_pod.close()
    assert shared.is_dir() and not in_pod.dir.exists()  # a CDI spec of a running claim may name it
