"""What the engine declares: the asymmetries the contract allows SQLite."""

from __future__ import annotations

from alkstore.engine import Capabilities

__all__ = ["CAPABILITIES"]

CAPABILITIES = Capabilities(
    # Notices are rows in the file: any payload fits.
    notify_payload_limit=None,
    # The watcher reads what committed since its last look: commits to one key
    # between two looks arrive as one wake.
    wakes_coalesce=True,
    # Nothing to reconnect: the watcher reads the file itself.
    reconnect_wakes=False,
)
