"""What an engine declares about itself: the asymmetries the contract allows."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Capabilities"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The ways an engine may differ from another and still keep the contract.

    The contract suite reads these and tests both sides of every declared
    limit; consumer code should not need them.
    """

    notify_payload_limit: int | None = None
    """Largest encoded notify payload in bytes; larger raises PayloadTooLarge.
    None means no limit."""
    wakes_coalesce: bool = True
    """Several notifies on a channel may arrive as one wake (True), or each
    notify arrives as its own wake (False)."""
    reconnect_wakes: bool = False
    """The engine may lose its wake connection and then sends every receiver
    ``Wake("__alkstore_listener_reconnected__")``."""
    shared_between_processes: bool = True
    """Stores opened on the same target in different processes share their
    storage (False for an engine that keeps everything in one process)."""
