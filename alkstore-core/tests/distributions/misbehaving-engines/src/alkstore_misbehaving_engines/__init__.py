"""An engine whose constructor raises."""

from __future__ import annotations

from typing import NoReturn

from alkstore.engine import CONTRACT_VERSION, Engine


class RaisesAtStart(Engine):
    name = "raisesatstart"
    schemes = ("raisesatstart",)
    contract_version = CONTRACT_VERSION

    def __init__(self) -> None:
        raise ValueError("init explodes")

    def open(self, target: str, **options: object) -> NoReturn:
        raise AssertionError("never made, so never opened")
