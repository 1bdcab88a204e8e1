"""Django's test runner, closing the alkstore stores before the test databases go."""

from __future__ import annotations

from typing import Any

from django.test.runner import DiscoverRunner

from .store import close_stores


class ShopTestRunner(DiscoverRunner):
    """Closes the stores the tests opened before destroying the test databases
    (PostgreSQL refuses to drop a database that still has connections)."""

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close_stores()
        super().teardown_databases(old_config, **kwargs)
