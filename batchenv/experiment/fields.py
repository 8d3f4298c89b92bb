"""Typed dataclass fields read from spec files: docs, types and value checks.

A spec's ``config`` and ``meta`` sections are checked against the fields of a dataclass
before anything runs: unknown keys name the valid ones, values are checked (and converted
where YAML reads them loosely, such as ``1e-4``, which YAML 1.1 reads as a string) against
the field's annotation.

    >>> from batchenv.experiment.spec import Meta
    >>> coerce("meta.sessions", int, 4.0)
    4
    >>> field_docs(Meta)["sessions"]
    'Sessions per trial: runs that differ only in their seed.'
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import textwrap
import types
import typing
from typing import Any

__all__ = ["coerce", "field_docs", "field_types", "type_name", "unknown_key"]


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls`` (first paragraph, one line)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0].body
        for node, following in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotation of every field of dataclass ``cls``, in field order."""
    hints = typing.get_type_hints(cls)
    return {field.name: hints[field.name] for field in dataclasses.fields(cls)}


def unknown_key(where: str, key: str, valid: list[str]) -> str:
    """The one-line message for an unknown key, with the closest valid one."""
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{where} has no field {key!r}{hint}; valid fields: {', '.join(valid)}"


def type_name(kind: Any) -> str:
    """``kind`` as a reader writes it: ``int``, ``tuple[int, ...]``, ``float | None``."""
    if isinstance(kind, type) and not typing.get_args(kind):
        return kind.__name__
    return str(kind).replace("typing.", "").replace("NoneType", "None")


def coerce(name: str, kind: Any, value: Any) -> Any:
    """``value`` checked against the annotation ``kind`` (and converted where safe).

    Raises TypeError naming ``name``, the expected type and the value.
    """
    try:
        return _coerce(kind, value)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be {type_name(kind)}, got {value!r} ({type(value).__name__})"
        ) from None


def _coerce(kind: Any, value: Any) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value)
            except (TypeError, ValueError):
                continue
        raise TypeError
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise TypeError
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], item) for item in value)
        if len(args) != len(value):
            raise TypeError
        return tuple(_coerce(arg, item) for arg, item in zip(args, value))
    if origin in (list, dict) or kind in (list, dict):
        if not isinstance(value, origin or kind):
            raise TypeError
        return value
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise TypeError
    if kind is int:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, str):
            value = float(value) if any(c in value.lower() for c in ".e") else int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        raise TypeError
    if kind is float:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, str):
            return float(value)
        if isinstance(value, (int, float)):
            return float(value)
        raise TypeError
    if kind is str:
        if isinstance(value, str):
            return value
        raise TypeError
    if isinstance(kind, type) and isinstance(value, kind):
        return value
    raise TypeError
