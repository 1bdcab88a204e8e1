"""Every public name of ``alkstore``, ``alkstore.engine`` and the pytest plugin has a
docstring.

The check is the site's own (``docs_hooks.undocumented``, which also fails
``hatch run docs:build``): what counts as public is what the API pages show,
read with griffe as mkdocstrings reads it. Here it runs with the tests too,
and is shown to find a missing docstring in a package made for the purpose.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parent.parent


def site_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = site_hooks()


def undocumented(name: str, *search_paths: Path) -> list[str]:
    found: list[str] = list(HOOKS.undocumented(HOOKS.load(name, *search_paths)))
    return found


def test_every_public_name_has_a_docstring() -> None:
    missing = [path for name in HOOKS.DOCUMENTED for path in undocumented(name, *HOOKS.SOURCES)]
    assert not missing, "public names without a docstring:\n" + "\n".join(missing)


def test_every_module_exports_names() -> None:
    # An __all__ griffe cannot read would make the check above pass vacuously.
    for name in HOOKS.DOCUMENTED:
        assert len(HOOKS.load(name, *HOOKS.SOURCES).exports or ()) >= 4, name


def test_a_missing_docstring_is_found(tmp_path: Path) -> None:
    package = tmp_path / "sample"
    package.mkdir()
    (package / "_impl.py").write_text(
        '"""Private."""\n\n\n'
        "class Thing:\n"
        '    """Documented."""\n\n'
        "    size: int\n"
        '    colour: str\n    """Documented too."""\n\n'
        "    def grow(self) -> None:\n        pass\n\n"
        "    def _hidden(self) -> None:\n        pass\n\n\n"
        'def helper() -> None:\n    """Documented."""\n\n\n'
        "def bare() -> None:\n    pass\n"
    )  # fmt: skip
    (package / "__init__.py").write_text(
        '"""Sample."""\n\nfrom sample._impl import Thing, bare, helper\n\n'
        '__all__ = ["Thing", "bare", "helper"]\n'
    )  # fmt: skip
    found = undocumented("sample", tmp_path)
    assert found == ["sample.Thing.size", "sample.Thing.grow", "sample.bare"]
