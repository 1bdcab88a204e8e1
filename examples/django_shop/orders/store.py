"""The alkstore store, opened on the same database as Django's connection.

``adopt_tx`` writes jobs and events through Django's own connection, inside
its ``transaction.atomic()``: so the store must keep its tables in that very
database — the same SQLite file, the same PostgreSQL database (in the schema
``alkstore``, or the one ``settings.ALKSTORE_OPTIONS`` names). Its target is
built from the connection's ``settings_dict`` when the store is first used,
never at import: Django's test runner switches every connection to the test
database after the settings are loaded, and the store must follow it.

One store per database alias, shared by the whole process (a store is safe
to share between threads); :func:`close_stores` closes them.
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections

import alkstore

CONFIRMATIONS = "confirmations"
"""The queue of order confirmation jobs, ``{"order_id": ...}``."""
CONFIRMATION_QUEUE = alkstore.QueueOpts(visibility_timeout_s=60, max_attempts=5, backoff_base_s=1)
ORDERS_STREAM = "orders"
"""The stream of order events: ``placed`` and ``confirmed``."""

# Options of Django's postgresql backend that are Django's, not libpq's.
_DJANGO_ONLY_OPTIONS = frozenset(
    {"assume_role", "isolation_level", "pool", "server_side_binding", "cursor_factory"}
)

_stores: dict[str, alkstore.Store] = {}
_lock = threading.Lock()


def store_target(settings_dict: dict[str, Any]) -> str:
    """The alkstore target of the database a Django connection's ``settings_dict`` names.

    SQLite: the database file's path. PostgreSQL: a libpq ``key=value``
    connection string with what Django connects with (name, user, password,
    host, port and the libpq ``OPTIONS``).
    """
    engine: str = settings_dict["ENGINE"]
    name = str(settings_dict["NAME"] or "")
    if engine == "django.db.backends.sqlite3":
        if not name or name == ":memory:" or "mode=memory" in name:
            raise ImproperlyConfigured(
                f"alkstore needs the SQLite database in a file, not {name or 'in memory'!r} "
                "(set DATABASES TEST NAME to a file for the tests)"
            )
        return name
    if engine == "django.db.backends.postgresql":
        params: dict[str, object] = {
            key: value
            for key, value in settings_dict.get("OPTIONS", {}).items()
            if key not in _DJANGO_ONLY_OPTIONS and isinstance(value, (str, int))
        }
        for key, setting in (
            ("dbname", "NAME"), ("user", "USER"), ("password", "PASSWORD"),
            ("host", "HOST"), ("port", "PORT"),
        ):  # fmt: skip
            if settings_dict.get(setting):
                params[key] = settings_dict[setting]
        return " ".join(f"{key}={_libpq_quoted(str(value))}" for key, value in params.items())
    raise ImproperlyConfigured(f"alkstore runs on SQLite and PostgreSQL, not on {engine}")


def _libpq_quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def get_store(using: str = DEFAULT_DB_ALIAS) -> alkstore.Store:
    """The store on the database of Django's connection ``using``, opened at first use.

    Call it before ``transaction.atomic()``, not inside: opening a store on
    SQLite brings alkstore's tables up to date in the file, which needs the
    write lock that an open Django transaction in the same thread holds.

    Raises:
        RuntimeError: the store is not open yet, and this thread's connection
            to the SQLite database is inside ``atomic()``.
    """
    with _lock:
        store = _stores.get(using)
        if store is None:
            django_connection = connections[using]
            if django_connection.vendor == "sqlite" and django_connection.in_atomic_block:
                raise RuntimeError(
                    "open the alkstore store (get_store()) before transaction.atomic(): on "
                    "SQLite it would wait for the write lock this very transaction holds"
                )
            target = store_target(django_connection.settings_dict)
            store = alkstore.open(target, **getattr(settings, "ALKSTORE_OPTIONS", {}))
            store.queue(CONFIRMATIONS, CONFIRMATION_QUEUE)  # enqueue_tx stamps these opts
            _stores[using] = store
        return store


def close_stores() -> None:
    """Close every store opened here; the next :func:`get_store` opens a new one.

    The test runner calls this before it destroys the test databases: on
    PostgreSQL a database with open connections cannot be dropped.
    """
    with _lock:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        store.close()
