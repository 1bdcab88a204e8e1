"""An engine that opens stores which do nothing but remember how they were opened."""

from __future__ import annotations

from typing import Any, NoReturn

from alkstore import QueueOpts
from alkstore.engine import Capabilities, Engine, Store


class DummyStore(Store):
    """A store whose every mechanism refuses: only its opening is observable."""

    def __init__(self, target: str, options: dict[str, Any]) -> None:
        super().__init__(target, Capabilities())
        self.options = options

    def _close(self) -> None:
        """Nothing to release."""

    def _notify(self, channel: str, payload_json: str) -> NoReturn:
        raise NotImplementedError

    def _watch(self, key: str) -> NoReturn:
        raise NotImplementedError

    def _stream(self, name: str) -> NoReturn:
        raise NotImplementedError

    def _queue(self, name: str, opts: QueueOpts) -> NoReturn:
        raise NotImplementedError

    def _try_lock(self, name: str, owner: str, ttl_s: float) -> NoReturn:
        raise NotImplementedError

    def _schedule(self, *args: Any) -> NoReturn:
        raise NotImplementedError

    def _unschedule(self, name: str) -> NoReturn:
        raise NotImplementedError

    def _due_schedules(self) -> NoReturn:
        raise NotImplementedError

    def _fire_boundary(self, *args: Any) -> NoReturn:
        raise NotImplementedError

    def _until_next_fire(self) -> NoReturn:
        raise NotImplementedError

    def _begin_tx(self) -> NoReturn:
        raise NotImplementedError

    def _inspect(self) -> NoReturn:
        raise NotImplementedError

    def _adopt_tx(self, connection: Any) -> NoReturn:
        raise NotImplementedError


class DummyEngine(Engine):
    name = "dummy"
    schemes = ("dummy", "dummy+mem", "otherscheme")
    contract_version = "1.0"

    def open(self, target: str, **options: Any) -> Store:
        unknown = set(options) - {"flavour"}
        if unknown:
            raise TypeError(f"unknown option {', '.join(sorted(unknown))}")
        return DummyStore(target, options)
