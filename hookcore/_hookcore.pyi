"""Types of the Cython extension `hookcore._hookcore` (hookcore/_hookcore.pyx), so mypy and a reader
follow every call from Python into the C core. Keep in step with the .pyx."""

from collections.abc import Mapping
from typing import TypedDict

MAX_DEVICES: int
MAX_SLOTS: int
MEM_UNLIMITED: int
MEM_MAX: int
SM_UNLIMITED: int
LEDGER_VERSION: int
LIMITER_BURST_NS: int
LIMITER_WAKE_NS: int
SM_PPM_FULL: int
DEFAULT_LEDGER: str
CONFIG_ROOT: str

class HookConfigError(ValueError): ...
class LedgerError(OSError): ...

class DeviceValues(TypedDict):
    index: int
    memory: int | None
    cores: int
    uuid: str | None
    strict: bool
    full_load_mhz: int | None
    clock_elasticity: float | None
    context_memory: int | None
    device_sms: int | None
    priority: str | None

class ConfigValues(TypedDict):
    origin: str
    device_count: int
    uuid_keyed: bool
    ledger_path: str | None
    board_dir: str | None
    devices: list[DeviceValues]

class ParsedConfig:
    def values(self) -> ConfigValues: ...

class DeviceInfo(TypedDict):
    index: int
    uuid: str | None
    memory_limit: int | None
    sm_limit: int
    used: int
    peak: int
    live_processes: int

class LimiterInfo(TypedDict):
    active: bool
    share: int
    charged_ns: int
    throttled_ns: int
    tokens_ns: int
    granted_ns: int
    device_ns: int
    sm_ppm: int
    factor_milli: int
    elastic_milli: int
    elastic_fit: bool
    yielded_ns: int
    elapsed_ns: int

class ProcessInfo(TypedDict):
    slot: int
    state: str
    pid: int
    start_time: int
    nonce: int
    used: list[int]

def parse_count() -> int: ...
def parse_memory(value: str, name: str = ...) -> int: ...
def parse_sm(value: str, name: str = ...) -> int: ...
def uuid_equal(a: str, b: str) -> bool: ...
def parse_config(env: Mapping[str, str], file_text: str | None = None, file_path: str | None = None,
                 stem: str = "vgpu") -> ParsedConfig: ...
def config_file_path(stem: str) -> str: ...
def create_ledger(path: str, config: ParsedConfig) -> None: ...
def proc_start_time(pid: int) -> int: ...

class LedgerView:
    path: str
    def __init__(self, path: str, snapshot: bool = False) -> None: ...
    def close(self) -> None: ...
    @property
    def version(self) -> int: ...
    @property
    def device_count(self) -> int: ...
    @property
    def slot_hwm(self) -> int: ...
    def device(self, index: int) -> DeviceInfo: ...
    def limiter(self, index: int) -> LimiterInfo: ...
    def process(self, slot: int) -> ProcessInfo: ...
