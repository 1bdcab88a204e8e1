"""The engine contract's version: which engines this core can drive.

``CONTRACT_VERSION`` is ``"MAJOR.MINOR"``. A minor release of the contract
only adds (a helper, an optional hook with a default), so an engine written
for ``1.0`` runs on a core implementing ``1.4``; a major release changes or
removes something engines rely on. Each engine declares the version it was
written for (``Engine.contract_version``) and discovery refuses one that this
core cannot drive, naming what to upgrade.
"""

from __future__ import annotations

import re

from alkstore._errors import EngineNotFound

__all__ = ["CONTRACT_VERSION", "check_contract_version"]

CONTRACT_VERSION = "1.8"
"""The version of the engine contract (``alkstore.engine``) this core implements."""

_VERSION = re.compile(r"([0-9]+)\.([0-9]+)")


def check_contract_version(declared: object, engine: str, distribution: str) -> None:
    """Refuse an engine written for a contract this core cannot drive.

    Raises:
        EngineNotFound: ``declared`` is missing or malformed, names another
            major version, or a newer minor one; the message names both
            versions and which distribution to upgrade.
    """
    ours = _parse(CONTRACT_VERSION)
    match = _VERSION.fullmatch(declared) if isinstance(declared, str) else None
    if match is None:
        raise EngineNotFound(
            f"the alkstore engine {engine!r} ({distribution}) declares no valid engine "
            f"contract version (contract_version = {declared!r}; expected 'MAJOR.MINOR', e.g. "
            f"{CONTRACT_VERSION!r}); it predates alkstore-core's contract checks: upgrade "
            f"{distribution}"
        )
    theirs = (int(match[1]), int(match[2]))
    if theirs[0] == ours[0] and theirs[1] <= ours[1]:
        return
    newer = theirs > ours
    upgrade = "alkstore-core" if newer else distribution
    raise EngineNotFound(
        f"the alkstore engine {engine!r} ({distribution}) was written for engine contract "
        f"{declared}, but this alkstore-core implements {CONTRACT_VERSION}: upgrade {upgrade} "
        f"to a version {'implementing' if newer else 'written for'} contract "
        f"{theirs[0] if newer else ours[0]}.x"
    )


def _parse(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor)
