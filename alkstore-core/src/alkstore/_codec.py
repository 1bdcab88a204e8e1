"""The JSON codec every engine stores payloads with.

Payloads are JSON values: ``None``, ``bool``, ``int``, ``float`` (finite),
``str``, lists (tuples are accepted and come back as lists) and dictionaries
with ``str`` keys. Anything else raises :class:`~alkstore.Codec` before a byte
is written, so what comes back out is always equal to what went in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from alkstore._errors import Codec

__all__ = ["JSONValue", "decode", "encode"]

JSONValue = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
"""What a payload decodes to."""

_SCALARS = (str, int, float, bool, type(None))


def _refuse(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


# Made once: json.loads(text, parse_constant=...) builds a decoder per call.
_decoder = json.JSONDecoder(parse_constant=_refuse_constant)

# The decoder's scanner, called directly for text that is one JSON value and
# nothing around it (all that ``encode`` writes): ``JSONDecoder.decode`` adds
# two Python calls and two whitespace matches, more than the scan of a small
# payload costs, and every claimed job and read event is decoded.
_scan_once: Callable[[str, int], tuple[Any, int]] = getattr(_decoder, "scan_once")  # noqa: B009 - typeshed omits it

_encoder = json.JSONEncoder(
    ensure_ascii=False,
    allow_nan=False,
    separators=(",", ":"),
    default=_refuse,
)

# The C encoder behind ``_encoder``, made once rather than per call as
# ``JSONEncoder.encode`` does: a microsecond on every enqueue and publish.
# Circular references need no marker check: ``_check`` has refused them.
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_one_shot = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(
        None, _refuse, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


_TOO_DEEP = "payload is nested more than 500 levels deep (or refers to itself)"


def _dumps(value: object) -> str:
    if _one_shot is None:
        return _encoder.encode(value)
    return "".join(_one_shot(value, 0))


def encode(payload: object) -> str:
    """Encode ``payload`` as compact UTF-8-safe JSON text.

    Raises:
        Codec: ``payload`` is not a JSON value; the message says where and why.
    """
    if not _is_json(payload, 0):
        try:
            _check(payload, "payload")  # raises, saying where and why
        except RecursionError:  # called from deep in the caller's own stack
            raise Codec(_TOO_DEEP) from None
    try:
        text = _dumps(payload)
    except (ValueError, TypeError, RecursionError) as exc:
        raise Codec(f"payload cannot be encoded as JSON: {exc}") from exc
    return text


def decode(text: str | bytes) -> Any:
    """Decode JSON text stored by :func:`encode`.

    Raises:
        Codec: ``text`` is not valid JSON.
    """
    if type(text) is str:
        try:
            value, end = _scan_once(text, 0)
        except (StopIteration, ValueError, RecursionError):
            pass  # decoded again below, which says why it fails
        else:
            if end == len(text):
                return value
    try:
        if not isinstance(text, str):
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        return _decoder.decode(text)
    except (ValueError, RecursionError) as exc:
        raise Codec(f"stored payload is not valid JSON: {exc}") from exc


def _is_json(value: object, depth: int) -> bool:  # noqa: PLR0911 - flat: one frame a level
    """True if ``value`` round-trips through JSON: :func:`_check` without the messages.

    Every payload goes through here, so it tests exact types and builds no
    strings; subclasses and refusals go to :func:`_check`, which explains.
    """
    if depth > 500:
        return False
    if type(value) is str:
        return value.isascii() or _is_text(value)
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is dict:
        for key, item in value.items():  # loops, not all(): one stack frame per level
            if type(key) is not str or not (key.isascii() or _is_text(key)):
                return False
            if not _is_json(item, depth + 1):
                return False
        return True
    if type(value) is list or type(value) is tuple:
        for item in value:  # noqa: SIM110 - all() would add two frames per level
            if not _is_json(item, depth + 1):
                return False
        return True
    return type(value) is int or type(value) is bool or value is None


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check(value: object, where: str, depth: int = 0) -> None:  # noqa: PLR0912 - one frame a level
    """Reject what ``json`` would encode lossily or not at all.

    ``json`` turns non-str keys into strings and NaN into a non-standard token,
    and passes lone surrogates through; none of those would round-trip.
    """
    if depth > 500:
        raise Codec(f"{_TOO_DEEP} at {where if len(where) <= 80 else where[:77] + '...'}")
    if isinstance(value, str):
        if not value.isascii():
            _check_text(value, where)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise Codec(f"{where} is {value!r}; JSON has no NaN or infinity")
    elif isinstance(value, _SCALARS):
        pass
    elif isinstance(value, dict):
        for key, item in value.items():  # here, not in a helper: one stack frame per level
            if not isinstance(key, str):
                raise Codec(
                    f"{where} has a key of type {type(key).__name__} ({key!r}); "
                    "JSON object keys must be str"
                )
            if not key.isascii():
                _check_text(key, f"key of {where}")
            _check(item, f"{where}[{key!r}]", depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, f"{where}[{index}]", depth + 1)
    else:
        raise Codec(
            f"{where} is a {type(value).__name__}, which is not a JSON value "
            "(use None, bool, int, float, str, list or dict with str keys)"
        )


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Codec(f"{where} holds lone surrogates and is not valid Unicode text") from None
