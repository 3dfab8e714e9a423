"""Opaque config: strict JSON -> dataclass decoding and validation, usable without a driver.

A driver's `config_type` is a dataclass; `decode_config(DriverClass, parameters)` turns the
``parameters`` of a claim's or class's opaque config into it (unknown fields, wrong types and a
wrong ``apiVersion``/``kind`` are errors naming the field) and then runs the config type's own
``validate()``. Prepare and the admission webhook call the same function on the driver *class*,
so they always give the same verdict. `encode_config` is the inverse (for examples and tests).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from dra.driver import Driver

__all__ = ["ConfigError", "decode_config", "encode_config"]

MAX_NAME = 64  # characters of an unknown field's name repeated in an error (a claim's author chooses it)


class ConfigError(ValueError):
    """Opaque config that does not decode; `path` names the field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"field {path!r}: {message}" if path else message)
        self.path = path


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _json_name(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("json", _camel(f.name)))


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def _decode_value(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        errors = []
        for a in non_none:
            try:
                return _decode_value(a, value, path)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(path, f"expected {' or '.join(_describe(a) for a in non_none)}, got {_type_name(value)}")
    if origin is typing.Literal:
        if value in args and type(value) in {type(a) for a in args}:
            return value
        raise ConfigError(path, f"must be one of {list(args)}, got {value!r}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, value, path)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise ConfigError(path, f"must be one of {[m.value for m in tp]}, got {value!r}") from None
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(path, f"expected boolean, got {_type_name(value)} {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(path, f"expected integer, got {_type_name(value)} {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(path, f"expected number, got {_type_name(value)} {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(path, f"expected string, got {_type_name(value)} {value!r}")
    if origin in (list, tuple, typing.Sequence, Sequence) or tp in (list, tuple):
        if not isinstance(value, list):
            raise ConfigError(path, f"expected array, got {_type_name(value)}")
        item = args[0] if args else Any
        items = [_decode_value(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple or tp is tuple else items
    if origin in (dict, typing.Mapping, Mapping) or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected object, got {_type_name(value)}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _decode_value(vt, v, f"{path}.{k}") for k, v in value.items()}
    raise ConfigError(path, f"the driver's config type uses an unsupported field type {tp!r}")


def _describe(tp: Any) -> str:
    if dataclasses.is_dataclass(tp):
        return "object"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(tp, getattr(tp, "__name__", str(tp)))


def _decode_dataclass(cls: type, value: Any, path: str, skip: tuple[str, ...] = ()) -> Any:
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected object, got {_type_name(value)}")
    hints = typing.get_type_hints(cls)
    fields = {_json_name(f): f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(k for k in value if k not in fields and k not in skip)
    if unknown:
        k = unknown[0] if len(unknown[0]) <= MAX_NAME else unknown[0][:MAX_NAME] + "..."  # it goes into events
        where = f"{path}.{k}" if path else k
        hint = next((j for j in fields if j.lower().replace("_", "") == k.lower().replace("_", "")), None)
        known = ", ".join(sorted(fields)) or "(none)"
        raise ConfigError(where, "unknown field" + (f" (did you mean {hint!r}?)" if hint else "") + f"; known fields: {known}")
    kwargs = {}
    for jname, f in fields.items():
        sub = f"{path}.{jname}" if path else jname
        if jname in value:
            kwargs[f.name] = _decode_value(hints[f.name], value[jname], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(sub, "required field is missing")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(path, str(e)) from None


def _driver_class(driver: type[Driver] | Driver) -> type[Driver]:
    return driver if isinstance(driver, type) else type(driver)


def decode_config(driver: type[Driver] | Driver, parameters: Any) -> Any:
    """Decode one opaque ``parameters`` object into the driver's `config_type`, strictly.

    The object must carry ``apiVersion`` (the driver's `config_api_version`) and ``kind`` (the
    config type's class name); every other key must be a field of the dataclass (Python
    ``snake_case`` fields are spelled ``camelCase`` in JSON, or as ``metadata={"json": ...}``
    says); types must match exactly. Then the config's ``validate()`` runs, when it has one.
    Works on the driver class (an instance is accepted too). Raises ConfigError.
    """
    cls = _driver_class(driver)
    cfg_type = cls.config_type
    if cfg_type is None:
        raise ConfigError("", f"driver {cls.name} takes no opaque config; remove the config entry for it")
    if not isinstance(parameters, dict):
        raise ConfigError("", f"parameters must be a JSON object, got {_type_name(parameters)}")
    want_kind = cfg_type.__name__
    if cls.config_api_version is not None and parameters.get("apiVersion") != cls.config_api_version:
        raise ConfigError("apiVersion", f"must be {cls.config_api_version!r}, got {parameters.get('apiVersion')!r}")
    if parameters.get("kind") != want_kind:
        raise ConfigError("kind", f"must be {want_kind!r}, got {parameters.get('kind')!r}")
    config = _decode_dataclass(cfg_type, parameters, "", skip=("apiVersion", "kind"))
    validate = getattr(config, "validate", None)
    if callable(validate):
        try:
            validate()
        except ValueError as e:
            raise ConfigError("", f"invalid: {e}") from None
    return config


def _encode_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {_json_name(f): _encode_value(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_encode_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode_value(v) for k, v in value.items()}
    return value


def encode_config(driver: type[Driver] | Driver, config: Any) -> dict[str, Any]:
    """The opaque ``parameters`` object that `decode_config` turns back into `config`."""
    cls = _driver_class(driver)
    if cls.config_type is None or not isinstance(config, cls.config_type):
        raise TypeError(f"{config!r} is not a {cls.config_type!r}, the config type of driver {cls.name}")
    out: dict[str, Any] = {}
    if cls.config_api_version is not None:
        out["apiVersion"] = cls.config_api_version
    out["kind"] = cls.config_type.__name__
    out.update(_encode_value(config))
    return out
