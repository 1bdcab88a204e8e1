"""``alkstore web``: serve the operator dashboard (the ``web`` extra)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from typing import Any

from alkstore._cli._common import EXIT_OK, CommandError, UsageError, command, opened_store
from alkstore._discovery import redact

__all__ = ["register"]

TOKEN_VARIABLE = "ALKSTORE_WEB_TOKEN"


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``web`` to ``commands``."""
    web = command(commands, common, "web", "serve the operator dashboard over HTTP")(_web)
    web.add_argument(
        "--host", default="127.0.0.1", help="the address to bind (default: %(default)s)"
    )
    web.add_argument("--port", type=int, default=8765, help="the port (default: %(default)s)")
    web.add_argument(
        "--allow-actions", action="store_true",
        help="enable requeue, cancel and purge (each confirmed; off by default)",
    )  # fmt: skip
    web.add_argument(
        "--token",
        help=f"require this bearer token or a login for every page (or ${TOKEN_VARIABLE})",
    )


def _web(arguments: argparse.Namespace) -> int:
    try:
        import uvicorn  # noqa: PLC0415

        from alkstore.web import alkstore_web_app  # noqa: PLC0415
    except ImportError:
        raise CommandError(
            "the dashboard needs the web extra: pip install 'alkstore-core[web]'"
        ) from None
    if not 0 < arguments.port < 65536:
        raise UsageError(f"--port must be from 1 to 65535, not {arguments.port}")
    token = arguments.token or os.environ.get(TOKEN_VARIABLE) or None
    if token is None and not _loopback(arguments.host):
        print(
            f"alkstore web: warning: {arguments.host} is reachable from other hosts and no "
            f"--token (or ${TOKEN_VARIABLE}) is set: anyone who reaches it can look",
            file=sys.stderr,
        )
    with opened_store(arguments) as store:
        app = alkstore_web_app(store, allow_actions=arguments.allow_actions, token=token)
        print(
            f"alkstore web: serving {redact(str(store.location))} on "
            f"http://{arguments.host}:{arguments.port}/ "
            f"(actions {'on' if arguments.allow_actions else 'off'}, "
            f"{'token required' if token else 'no token'})",
            file=sys.stderr,
            flush=True,
        )
        uvicorn.run(
            app, host=arguments.host, port=arguments.port, log_level="warning",
            timeout_graceful_shutdown=2,  # live viewers hold a stream open
        )  # fmt: skip
    return EXIT_OK


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
