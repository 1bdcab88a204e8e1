"""``payload_as``: build typed values from decoded JSON payloads.

Supported targets: ``Any``/``object``; ``None``, ``bool``, ``int``, ``float``
(ints widen), ``str``; ``list[T]``, ``tuple[T, ...]``, ``tuple[A, B]``,
``dict[str, T]``; ``Optional``/unions (first match wins); ``Literal``;
enums (by value); and dataclasses, field by field, recursively. A payload that
does not fit raises :class:`~alkstore.Codec` saying where.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any, TypeVar

from alkstore._errors import Codec

__all__ = ["HasPayload", "convert_payload"]

T = TypeVar("T")


def convert_payload(value: Any, target: type[T]) -> T:
    """Return ``value`` (a decoded JSON payload) as an instance of ``target``.

    Raises:
        Codec: the payload does not fit ``target``; the message names the path.
    """
    result: T = _convert(value, target, "payload")
    return result


class HasPayload:
    """Mixin for values that carry a decoded JSON ``payload``."""

    __slots__ = ()

    payload: Any

    def payload_as(self, type_: type[T]) -> T:
        """Return the payload built as ``type_`` (a dataclass, list[...], int, ...).

        Raises:
            Codec: the payload does not fit ``type_``; the message names where.
        """
        return convert_payload(self.payload, type_)


def _convert(value: Any, target: Any, where: str) -> Any:  # noqa: PLR0911
    if target is Any or target is object:
        return value
    if target is None or target is type(None):
        if value is None:
            return None
        raise _mismatch(where, "null", value)
    origin = typing.get_origin(target)
    if origin is typing.Union or origin is types.UnionType:
        return _convert_union(value, typing.get_args(target), where)
    if origin is typing.Literal:
        if value in typing.get_args(target):
            return value
        raise _mismatch(where, f"one of {typing.get_args(target)!r}", value)
    if origin in (list, tuple, dict):
        return _convert_generic(value, origin, typing.get_args(target), where)
    if isinstance(target, type):
        if dataclasses.is_dataclass(target):
            return _convert_dataclass(value, target, where)
        if issubclass(target, enum.Enum):
            try:
                return target(value)
            except ValueError:
                raise _mismatch(where, f"a value of {target.__name__}", value) from None
        return _convert_plain(value, target, where)
    raise Codec(f"payload_as cannot build {target!r} (at {where})")


def _convert_plain(value: Any, target: type, where: str) -> Any:
    if target is bool:
        if isinstance(value, bool):
            return value
    elif target is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif target is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif target in (str, list, dict):
        if isinstance(value, target):
            return value
    elif target is tuple:
        if isinstance(value, list):
            return tuple(value)
    else:
        raise Codec(f"payload_as cannot build {target.__name__} (at {where})")
    raise _mismatch(where, target.__name__, value)


def _convert_union(value: Any, members: tuple[Any, ...], where: str) -> Any:
    for member in members:
        try:
            return _convert(value, member, where)
        except Codec:
            continue
    names = " | ".join(getattr(m, "__name__", repr(m)) for m in members)
    raise _mismatch(where, names, value)


def _convert_generic(value: Any, origin: type, args: tuple[Any, ...], where: str) -> Any:
    if origin is dict:
        if not isinstance(value, dict):
            raise _mismatch(where, "an object", value)
        item_type = args[1] if len(args) == 2 else Any
        return {k: _convert(v, item_type, f"{where}[{k!r}]") for k, v in value.items()}
    if not isinstance(value, list):
        raise _mismatch(where, "an array", value)
    if origin is list:
        item_type = args[0] if args else Any
        return [_convert(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if args and len(args) != len(value):
        raise Codec(f"{where} has {len(value)} items, expected {len(args)}")
    item_types = args or (Any,) * len(value)
    pairs = enumerate(zip(value, item_types, strict=True))
    return tuple(_convert(v, t, f"{where}[{i}]") for i, (v, t) in pairs)


def _convert_dataclass(value: Any, target: type, where: str) -> Any:
    if not isinstance(value, dict):
        raise _mismatch(where, f"an object for {target.__name__}", value)
    hints = _type_hints(target)
    fields = {f.name: f for f in dataclasses.fields(target) if f.init}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise Codec(f"{where} has keys {target.__name__} does not define: {', '.join(unknown)}")
    arguments = {}
    for name, field in fields.items():
        if name in value:
            arguments[name] = _convert(value[name], hints.get(name, Any), f"{where}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise Codec(f"{where} lacks {name!r}, which {target.__name__} requires")
    return target(**arguments)


@functools.lru_cache(maxsize=256)
def _type_hints(target: type) -> dict[str, Any]:
    return typing.get_type_hints(target)


def _mismatch(where: str, expected: str, value: Any) -> Codec:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return Codec(f"{where} should be {expected}, got {type(value).__name__} {shown}")
