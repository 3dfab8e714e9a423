"""`dra run`'s flags are DaemonSettings' fields: one declaration each (`dra._runtime.flags`), the
typer options generated from them, bad values refused naming the flag and what it takes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from dra._runtime import daemon as daemon_mod
from dra._runtime import flags
from dra._runtime.daemon import DaemonSettings
from dra.errors import UserError


def cli(monkeypatch: pytest.MonkeyPatch) -> tuple[typer.Typer, list[tuple[str, DaemonSettings]]]:
    """`dra run` as the CLI builds it, with `run` recording what it was given instead of serving."""
    seen: list[tuple[str, DaemonSettings]] = []
    monkeypatch.setattr(daemon_mod, "run", lambda entry, settings: seen.append((entry, settings)))
    monkeypatch.setattr(daemon_mod.dra_logging, "setup", lambda *_a: None)
    for name in ("NODE_NAME", "POD_UID", "KUBECONFIG", "DRA_FAKE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    app = typer.Typer()
    daemon_mod.register(app)
    app.command("noop")(lambda: None)  # two commands: typer keeps `run` as a sub-command
    return app, seen


def test_every_field_is_one_flag_and_the_command_has_exactly_those_options() -> None:
    fields = {f.name for f in dataclasses.fields(DaemonSettings)}
    declared = {f.name: fl.name for f, fl in flags.fields(DaemonSettings)}
    assert set(declared) == fields, "a DaemonSettings field without its flag"
    assert len(set(declared.values())) == len(declared)
    app = typer.Typer(add_completion=False)
    daemon_mod.register(app)
    command: Any = get_command(app)
    options = {opt: p.name for p in command.params for opt in p.opts if opt.startswith("--")}
    assert options == {name: field for field, name in declared.items()}
    assert [p.name for p in command.params if not p.opts[0].startswith("--")] == ["driver"]


def test_with_only_the_node_the_settings_are_the_fields_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    app, seen = cli(monkeypatch)
    r = CliRunner().invoke(app, ["run", "example", "--node-name", "n1"])
    assert r.exit_code == 0, r.output
    assert seen == [("example", DaemonSettings(node_name="n1"))]
    assert seen[0][1].watchdog_memory_tolerance == 64 << 20  # the flag's given "64Mi", parsed


# A value for every flag, none of them its default, as a user would type it; and what the field holds.
EVERY_FLAG: dict[str, tuple[list[str], Any]] = {
    "node_name": (["--node-name", "n2"], "n2"),
    "kubeconfig": (["--kubeconfig", "/k/config"], Path("/k/config")),
    "plugin_dir": (["--plugin-dir", "/k/plugins"], Path("/k/plugins")),
    "registrar_dir": (["--registrar-dir", "/k/registry"], Path("/k/registry")),
    "cdi_dir": (["--cdi-dir", "/k/cdi"], Path("/k/cdi")),
    "state_dir": (["--state-dir", "/k/state"], Path("/k/state")),
    "pod_uid": (["--pod-uid", "uid-1"], "uid-1"),
    "metrics_port": (["--metrics-port", "-1"], -1),
    "metrics_address": (["--metrics-address", "127.0.0.1"], "127.0.0.1"),
    "grpc_workers": (["--grpc-workers", "32"], 32),
    "log_format": (["--log-format", "text"], "text"),
    "log_level": (["--log-level", "WARNING"], "warning"),
    "driver_settings": (["--set", "count=4", "--set", "memory=1Gi", "--set", "count=3"], {"count": "3", "memory": "1Gi"}),
    "fake": (["--fake", "h200x8"], "h200x8"),
    "hook_dir": (["--hook-dir", "/k/hooks"], Path("/k/hooks")),
    "preload": (["--preload", "env"], "env"),
    "slice_layout": (["--slice-layout", "per-device"], "per-device"),
    "allow_claim_loosening": (["--allow-claim-loosening"], True),
    "watchdog": (["--watchdog", "taint"], "taint"),
    "watchdog_interval": (["--watchdog-interval", "0.5"], 0.5),
    "watchdog_memory_tolerance": (["--watchdog-memory-tolerance", "512Mi"], 512 << 20),
    "watchdog_share_window": (["--watchdog-share-window", "20"], 20.0),
    "watchdog_share_tolerance": (["--watchdog-share-tolerance", "5"], 5.0),
}


def test_every_flag_sets_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(EVERY_FLAG) == {f.name for f in dataclasses.fields(DaemonSettings)}, "a flag this test does not give"
    app, seen = cli(monkeypatch)
    args = [word for words, _ in EVERY_FLAG.values() for word in words]
    r = CliRunner().invoke(app, ["run", "example", *args])
    assert r.exit_code == 0, r.output
    (_entry, settings), = seen
    got = {name: getattr(settings, name) for name in EVERY_FLAG}
    assert got == {name: want for name, (_words, want) in EVERY_FLAG.items()}
    defaults = DaemonSettings(node_name="n2")
    assert all(got[name] != getattr(defaults, name) for name in EVERY_FLAG if name != "node_name"), "a value equal to its default"


def test_the_environment_fills_the_flags_that_name_a_variable_and_empty_ones_are_not_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    app, seen = cli(monkeypatch)
    env = {"NODE_NAME": "n3", "POD_UID": "", "KUBECONFIG": "/k/config", "DRA_FAKE_DEVICES": "two-gpus"}
    r = CliRunner().invoke(app, ["run", "example", "--pod-uid="], env=env)
    assert r.exit_code == 0, r.output
    (_entry, s), = seen
    assert (s.node_name, s.pod_uid, s.kubeconfig, s.fake) == ("n3", None, Path("/k/config"), "two-gpus")


@pytest.mark.parametrize(("args", "message"), [
    (["--preload", "x"], "--preload must be one of file, env, not 'x'"),
    (["--log-format", "yaml"], "--log-format must be one of json, text, not 'yaml'"),
    (["--log-level", "loud"], "--log-level must be one of debug, info, warning, error, not 'loud'"),
    (["--watchdog", "nuke"], "--watchdog must be one of report, kill, taint, off, not 'nuke'"),
    (["--slice-layout", "flat"], "--slice-layout must be one of auto, per-device, packed, not 'flat'"),
    (["--grpc-workers", "8"], "--grpc-workers must be at least 32, not 8"),
    (["--watchdog-memory-tolerance", "lots"], "--watchdog-memory-tolerance 'lots': ") ,
    (["--watchdog-interval", "0"], "--watchdog-*: watchdog interval must be 0.05..60 seconds"),
    (["--watchdog-interval", "5", "--watchdog-share-window", "1"], "--watchdog-*: "),
    (["--set", "count"], "--set 'count': expected key=value, e.g. --set count=4"),
    (["--node-name", ""], "--node-name (or NODE_NAME) is required."),
])
def test_a_bad_value_is_refused_naming_the_flag_and_what_it_takes(monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                                  message: str) -> None:
    app, seen = cli(monkeypatch)
    r = CliRunner().invoke(app, ["run", "example", "--node-name", "n", *args])
    assert isinstance(r.exception, UserError), r.output
    assert message in str(r.exception)
    assert seen == [], "the daemon ran with a bad flag"


def test_the_fix_of_an_unparsable_value_shows_a_good_one(monkeypatch: pytest.MonkeyPatch) -> None:
    app, _seen = cli(monkeypatch)
    r = CliRunner().invoke(app, ["run", "example", "--node-name", "n", "--watchdog-memory-tolerance", "lots"])
    assert "(e.g. --watchdog-memory-tolerance 64Mi)" in str(r.exception)


def test_settings_made_in_code_are_checked_like_the_flags() -> None:
    with pytest.raises(UserError, match="--preload must be one of file, env"):
        DaemonSettings(node_name="n", preload="both")
    with pytest.raises(UserError, match=r"--watchdog-\*"):
        DaemonSettings(node_name="n", watchdog_interval=0.0)
    assert DaemonSettings(node_name="n", watchdog="off").watchdog_settings() is None
    assert DaemonSettings(node_name="n", watchdog="kill").watchdog_settings().action == "kill"  # type: ignore[union-attr]


def test_a_given_default_parses_to_the_fields_default() -> None:
    for f, fl in flags.fields(DaemonSettings):
        if fl.given is not None:
            assert fl.parse is not None and fl.parse(fl.given) == f.default, f.name


@flags.settings
class Small:
    name: str = flags.flag(help="Who.", envvar="SMALL_NAME")
    level: str = flags.flag(default="info", help="How much.", choices=("debug", "info"), parse=str.lower)
    count: int = flags.flag(default=2, help="How many.", minimum=1)


def test_a_settings_class_of_its_own() -> None:
    assert flags.names(Small) == {"--name": "name", "--level": "level", "--count": "count"}
    assert flags.build(Small, {"name": "a", "level": "DEBUG", "count": None}) == Small("a", "debug", 2)
    with pytest.raises(UserError, match=r"^--name \(or SMALL_NAME\) is required\. Who\.$"):
        flags.build(Small, {"name": "", "level": None, "count": None})
    with pytest.raises(UserError, match="--count must be at least 1, not 0"):
        Small("a", count=0)

    app = typer.Typer()

    @app.command()
    @flags.options(Small)
    def main(**values: Any) -> None:
        print(flags.build(Small, values))

    r = CliRunner().invoke(app, ["--name", "b", "--level", "debug"])
    assert r.exit_code == 0 and "Small(name='b', level='debug', count=2)" in r.output, r.output
    assert "debug|info" in CliRunner().invoke(app, ["--help"]).output


def test_the_old_module_entry_refuses_instead_of_exiting_quietly() -> None:
    """An old chart or script that still runs the private module must fail loudly, not exit 0."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "dra._runtime.daemon"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "dra run" in done.stderr
