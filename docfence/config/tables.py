"""TOML tables and environment text turned into typed settings: the checks every section shares, and
error messages that name a setting as the user wrote it (`[section].key`, or the variable)."""

from __future__ import annotations

import ipaddress
from dataclasses import fields
from typing import Any

from docfence.core.errors import ConfigError

_SETTING_TYPES = {"int": int, "float": float, "str": str, "bool": bool}
_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}


def invalid(label: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{label}={value!r}: {allowed}")


def typed(label: str, value: Any, type_name: str) -> Any:
    """`value` checked against a simple annotation (int, float, str, bool); others pass through."""
    want = _SETTING_TYPES.get(type_name.split(" |")[0].strip())
    if want is None:
        return value
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        raise invalid(label, value, f"must be {_TYPE_WORDS[type_name.split(' |')[0].strip()]}")
    return value


def from_env(var: str, raw: str, type_name: str) -> Any:
    """An environment variable's text as `type_name`, or a ConfigError naming the variable."""
    try:
        return {"int": int, "float": float}.get(type_name, str)(raw)
    except ValueError:
        raise invalid(var, raw, f"must be {_TYPE_WORDS.get(type_name, type_name)}") from None


def section(cls: type, label: str, table: Any, **extra: Any) -> Any:
    """Build the frozen config `cls` from a TOML table; unknown keys and wrong types name `label`.key."""
    if not isinstance(table, dict):
        raise invalid(label, table, "must be a table")
    known = {f.name: str(f.type) for f in fields(cls) if f.name not in extra}
    for key in table:
        if key not in known:
            raise ConfigError(f"{label}: unknown key {key!r} (allowed: {', '.join(sorted(known))})")
    values = {key: typed(f"{label}.{key}", value, known[key]) for key, value in table.items()}
    try:
        return cls(**extra, **values)
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc.message}") from None


def strings_to_tuple(table: Any, key: str, section: str, what: str) -> Any:
    """The table with its `key` (a TOML list of strings) as the tuple a frozen setting holds."""
    if not isinstance(table, dict) or key not in table:
        return table
    values = table[key]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise invalid(f"{section}.{key}", values, f"must be a list of {what}")
    return {**table, key: tuple(values)}


def is_network(text: str) -> bool:
    """True for an IP address or a CIDR block (host bits allowed: 10.1.2.3/8)."""
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True
