"""Engine settings from the options of ``alkstore.open`` (and a URL's query string)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from alkstore._options import option_seconds

__all__ = ["settings_from_options"]

S = TypeVar("S")

Converter = Callable[[str, object], Any]
"""Checks and converts one option's value, given its name; raises ValueError naming it."""


def settings_from_options(
    settings_class: type[S],
    engine: str,
    options: Mapping[str, object],
    converters: Mapping[str, Converter] | None = None,
) -> S:
    """Build the dataclass ``settings_class`` from ``options``.

    The option names are the dataclass's fields; values go through
    ``converters[name]``, and a field without one is a number of seconds
    (``option_seconds``: text from a URL query string counts).

    Raises:
        TypeError: an option the engine does not know, named with those it does.
        ValueError: a bad value, naming the option.
    """
    known = [field.name for field in dataclasses.fields(settings_class)]  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(
            f"the {engine} engine has no option {', '.join(map(repr, unknown))} "
            f"(it knows: {', '.join(sorted(known))})"
        )
    converters = converters or {}
    values = {
        name: converters.get(name, option_seconds)(name, value) for name, value in options.items()
    }
    return settings_class(**values)
