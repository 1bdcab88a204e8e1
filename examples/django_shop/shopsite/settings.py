"""The shop's settings. What a deployment changes comes from the environment:

``DJANGO_SHOP_DATABASE``
    Where the orders live, and alkstore's tables beside them (the store is
    opened on the same database: see ``orders/store.py``).
    ``sqlite:////absolute/path.db``, ``sqlite:///relative.db`` (to the current
    folder) or ``postgresql://user:password@host:port/name`` (query parameters,
    such as ``?sslmode=require``, are libpq's). Default: ``shop.db`` beside
    ``manage.py``.
``DJANGO_SHOP_TEST_DATABASE``
    The database ``manage.py test`` makes and destroys. On SQLite a file (the
    default, ``<name>-test.db`` beside the database): Django's default test
    database there is in memory, which the store's own connections could not
    see. On PostgreSQL a database name; the default, ``test_<name>_<random>``,
    differs on every run, so runs sharing one server never meet (set it to
    keep one with ``--keepdb``).
``DJANGO_SECRET_KEY``, ``DJANGO_DEBUG`` (``1`` for on), ``DJANGO_ALLOWED_HOSTS`` (comma-separated)
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent


def database_from_url(url: str, test_name: str | None = None) -> dict[str, Any]:
    """One ``DATABASES`` entry from a database URL, with its test database's name."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        if not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
            raise ValueError(f"a SQLite URL is sqlite:///relative.db or sqlite:////abs.db: {url!r}")
        path = Path(os.path.abspath(url[len("sqlite:///") :]))
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path),
            # BEGIN IMMEDIATE: a transaction takes the write lock when it begins, so
            # one that reads first never fails on upgrading its lock while the
            # worker writes. Waits up to 20 s for another writer to finish.
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
            "TEST": {"NAME": test_name or str(path.with_name(f"{path.stem}-test{path.suffix}"))},
        }
    if parts.scheme in ("postgresql", "postgres"):
        name = unquote(parts.path.lstrip("/"))
        if not name:
            raise ValueError(f"the PostgreSQL URL names no database: {url!r}")
        return {
            # Django's postgresql backend uses psycopg 3 when it is installed, as here.
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": dict(parse_qsl(parts.query)),
            "TEST": {"NAME": test_name or f"test_{name}_{uuid.uuid4().hex[:8]}"},
        }
    raise ValueError(f"DJANGO_SHOP_DATABASE must be a sqlite:/// or postgresql:// URL: {url!r}")


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "django-insecure-only-for-the-example")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")

INSTALLED_APPS = ["orders"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
]
ROOT_URLCONF = "shopsite.urls"
WSGI_APPLICATION = "shopsite.wsgi.application"
TEST_RUNNER = "orders.test_runner.ShopTestRunner"

DATABASES = {
    "default": database_from_url(
        os.environ.get("DJANGO_SHOP_DATABASE", f"sqlite:///{BASE_DIR / 'shop.db'}"),
        os.environ.get("DJANGO_SHOP_TEST_DATABASE") or None,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

ALKSTORE_OPTIONS: dict[str, Any] = {}
"""Keyword arguments for ``alkstore.open`` (e.g. ``{"schema": "shop_jobs"}`` on PostgreSQL)."""

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_TZ = True
