"""The operator dashboard: an ASGI app over a store (``pip install 'alkstore-core[web]'``).

``alkstore_web_app(store)`` serves the overview, the job listings and (with
``allow_actions=True``) the dead-letter actions; ``alkstore web`` runs it
under uvicorn. See docs/dashboard.md. Importing this module needs the ``web``
extra; ``import alkstore`` never does.
"""

from __future__ import annotations

MISSING_EXTRA = "the dashboard needs the web extra: pip install 'alkstore-core[web]'"

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra only
    raise ImportError(MISSING_EXTRA) from exc

from alkstore.web._app import alkstore_web_app  # noqa: E402

__all__ = ["MISSING_EXTRA", "alkstore_web_app"]
