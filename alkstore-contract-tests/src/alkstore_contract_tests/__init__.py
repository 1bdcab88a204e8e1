"""The alkstore conformance suite, run by ``pytest --alkstore-engine=NAME``."""

__all__: list[str] = []
