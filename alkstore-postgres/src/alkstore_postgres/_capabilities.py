"""What the engine declares: the asymmetries the contract allows PostgreSQL."""

from __future__ import annotations

from alkstore.engine import Capabilities

__all__ = ["CAPABILITIES"]

CAPABILITIES = Capabilities(
    # NOTIFY payloads are limited to 8,000 bytes by the server.
    notify_payload_limit=8000,
    # Each NOTIFY arrives as its own wake.
    wakes_coalesce=False,
    # The listener connection can drop; it reconnects and says so.
    reconnect_wakes=True,
)
