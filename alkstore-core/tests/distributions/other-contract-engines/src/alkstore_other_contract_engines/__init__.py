"""Engines that declare engine contract versions other than core's."""

from __future__ import annotations

from typing import Any, NoReturn

from alkstore.engine import CONTRACT_VERSION, Engine

_MAJOR, _MINOR = (int(part) for part in CONTRACT_VERSION.split("."))


class _NeverOpens(Engine):
    def open(self, target: str, **options: Any) -> NoReturn:
        raise AssertionError("discovery must refuse this engine before opening anything")


class NextMajorEngine(_NeverOpens):
    name = "nextmajor"
    schemes = ("nextmajor",)
    contract_version = f"{_MAJOR + 1}.0"


class LastMajorEngine(_NeverOpens):
    name = "lastmajor"
    schemes = ("lastmajor",)
    contract_version = f"{_MAJOR - 1}.7"


class NextMinorEngine(_NeverOpens):
    name = "nextminor"
    schemes = ("nextminor",)
    contract_version = f"{_MAJOR}.{_MINOR + 1}"


class UnversionedEngine(_NeverOpens):
    name = "unversioned"
    schemes = ("unversioned",)
