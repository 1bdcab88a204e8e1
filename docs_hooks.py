"""mkdocs hooks for the site (mkdocs.yml).

- Each distribution's CHANGELOG.md becomes a page without a copy that could
  drift: a page whose whole text is ``include: PATH`` (PATH from the
  repository root) shows that file, its links into ``../docs/`` pointed at
  the site's own pages (the CHANGELOGs are written to be read on the forge
  too).
- The docstrings are written for ``pydoc`` and Sphinx-style readers: on the
  generated API pages, a cross-reference role (``:func:`open```) shows as
  its code alone (a leading ``~`` dropped), and a paragraph ending in
  ``::`` before an example ends in one colon.
- The build fails on a public name without a docstring (:func:`undocumented`,
  which ``tests/test_docstrings.py`` runs in the test suite too).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import griffe

ROOT = Path(__file__).parent
INCLUDE = re.compile(r"\Ainclude: (?P<path>\S+)\s*\Z")
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|exc|obj|const):<code>~?")
LITERAL_MARK = re.compile(r"::</p>")

SOURCES = [ROOT / d / "src" for d in ("alkstore-core", "alkstore-contract-tests")]
DOCUMENTED = ("alkstore", "alkstore.engine", "alkstore_contract_tests.plugin")
"""The modules whose public names the API pages show, every one with a docstring."""


def undocumented(module: griffe.Module) -> Iterator[str]:
    """The path of each public name of ``module`` without a docstring.

    Public is what the API pages show: each name the module's ``__all__``
    exports and, for classes, every member not starting with ``_`` (methods,
    properties, attributes, dataclass fields, enum members). griffe reads
    them as mkdocstrings does, so an attribute's docstring is the string
    literal right after it.
    """
    for name in sorted(str(export) for export in module.exports or ()):
        yield from _undocumented(module[name], f"{module.path}.{name}")


def _undocumented(obj: griffe.Object | griffe.Alias, path: str) -> Iterator[str]:
    target = obj.final_target if obj.is_alias else obj
    if target.docstring is None or not target.docstring.value.strip():
        yield path
    if target.is_class:
        for name, member in target.members.items():
            if not name.startswith("_"):
                yield from _undocumented(member, f"{path}.{name}")


def load(name: str, *search_paths: Path) -> griffe.Module:
    """The module ``name`` as griffe reads it from ``search_paths``, aliases resolved."""
    import griffe  # noqa: PLC0415 - the docs and test envs have it, a bare mkdocs may not

    loader = griffe.GriffeLoader(search_paths=[str(p) for p in search_paths])
    top, *rest = name.split(".")
    module = loader.load(top)
    loader.resolve_aliases(implicit=False, external=False)
    for part in rest:
        module = module[part]
    if not isinstance(module, griffe.Module):
        raise TypeError(f"{name} is not a module")
    return module


def on_config(config: Any, **_: Any) -> Any:
    """Refuse to build while a public name has no docstring."""
    from mkdocs.exceptions import PluginError  # noqa: PLC0415 - only mkdocs calls this

    missing = [path for name in DOCUMENTED for path in undocumented(load(name, *SOURCES))]
    if missing:
        raise PluginError("public names without a docstring:\n  " + "\n  ".join(missing))
    return config


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace an ``include: PATH`` page by the file at PATH."""
    match = INCLUDE.match(markdown)
    if match is None:
        return markdown
    text = (ROOT / match["path"]).read_text(encoding="utf-8")
    depth = page.file.src_uri.count("/")
    return text.replace("](../docs/", "](" + "../" * depth)


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """Drop the Sphinx roles and ``::`` markers the docstrings carry, on API pages."""
    if not page.file.src_uri.startswith("api/"):
        return html
    return LITERAL_MARK.sub(":</p>", ROLE.sub("<code>", html))
