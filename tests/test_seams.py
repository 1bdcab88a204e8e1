"""No distribution touches another's private names.

Each distribution is a unit of release: its ``_``-prefixed modules and
members may change in any version, so no other distribution (and nothing of
the product around them: these tests, the benchmarks, the examples) may use
them. Read statically from every module of the repository:

- importing a ``_``-prefixed module of another distribution is refused;
- ``something._name`` is refused where ``something`` is not ``self``/``cls``
  and no module of the accessing distribution defines ``_name`` (as a
  function, class, assignment or ``self._name = …``). An engine implements
  core's ``_``-prefixed hooks on its own subclasses: that is the seam, and
  ``self._hook`` is its own business; ``other._hook`` on core's objects is not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Most specific first: a file belongs to the first distribution whose folder holds it.
DISTRIBUTIONS = {
    "alkstore-core/tests/distributions/dummy-engine": "alkstore_dummy_engine",
    "alkstore-core/tests/distributions/other-contract-engines": "alkstore_other_contract_engines",
    "alkstore-contract-tests/tests/example-engine": "alkstore_example_memory",
    "alkstore-core": "alkstore",
    "alkstore-sqlite": "alkstore_sqlite",
    "alkstore-postgres": "alkstore_postgres",
    "alkstore-contract-tests": "alkstore_contract_tests",
}
OUTSIDE = "the product (tests, bench, examples)"
PACKAGES = set(DISTRIBUTIONS.values())
STANDARD = {"_exit", "_replace", "_asdict", "_fields", "_make", "_field_defaults", "_getframe"}
"""The standard library's public names that start with an underscore."""


@dataclass(frozen=True)
class Module:
    path: Path
    distribution: str
    tree: ast.Module

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"


def distribution_of(path: Path) -> str:
    relative = path.relative_to(ROOT).as_posix()
    for folder, package in DISTRIBUTIONS.items():
        if relative.startswith(folder + "/"):
            return package
    return OUTSIDE


def python_files() -> Iterator[Path]:
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if any(part.startswith(".") or part in {"build", "dist", "node_modules"} for part in parts):
            continue
        yield path


MODULES = [
    Module(path, distribution_of(path), ast.parse(path.read_text(), str(path)))
    for path in python_files()
]


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_names(modules: list[Module]) -> set[str]:
    """Every ``_name`` the modules define: defs, classes, assignments, attributes of self."""
    names: set[str] = set()
    for module in modules:
        annotated_only = {
            id(node.target)
            for node in ast.walk(module.tree)
            if isinstance(node, ast.AnnAssign) and node.value is None
        }
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                if id(node) not in annotated_only:  # a bare annotation defines nothing
                    names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[-1])
    return {name for name in names if private(name)}


def private_imports(module: Module) -> Iterator[str]:
    """Imports of another distribution's private modules or names."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            package, *rest = target.split(".")
            if package in PACKAGES and package != module.distribution and any(map(private, rest)):
                yield f"{module.where(node)} imports {target}"


def private_attributes(module: Module, own: set[str]) -> Iterator[str]:
    """``x._name`` where ``x`` is not self/cls and the distribution defines no ``_name``."""
    for node in ast.walk(module.tree):
        if not (isinstance(node, ast.Attribute) and private(node.attr)):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
            continue
        if node.attr not in own and node.attr not in STANDARD:
            yield f"{module.where(node)} uses .{node.attr} of another distribution"


def by_distribution() -> dict[str, list[Module]]:
    grouped: dict[str, list[Module]] = {}
    for module in MODULES:
        grouped.setdefault(module.distribution, []).append(module)
    return grouped


def test_every_file_is_read() -> None:
    assert len(MODULES) > 100
    assert {module.distribution for module in MODULES} >= PACKAGES | {OUTSIDE}


@pytest.mark.parametrize("distribution", sorted(PACKAGES | {OUTSIDE}))
def test_no_distribution_touches_anothers_private_names(distribution: str) -> None:
    modules = by_distribution()[distribution]
    own = set() if distribution == OUTSIDE else defined_names(modules)
    if distribution == "alkstore":
        violations: list[str] = []  # core's private names are its own
    else:
        violations = [
            violation
            for module in modules
            for violation in [*private_imports(module), *private_attributes(module, own)]
        ]
    assert violations == []


def test_the_check_sees_a_violation() -> None:
    """The rule itself can fail: an engine reaching into core is caught."""
    tree = ast.parse("def f(store):\n    return store._declared_queue_opts('q')\n")
    engine_module = Module(ROOT / "alkstore-sqlite" / "x.py", "alkstore_sqlite", tree)
    found = list(private_attributes(engine_module, defined_names([engine_module])))
    assert len(found) == 1
    assert "_declared_queue_opts" in found[0]
    tree = ast.parse("from alkstore._store import Store\n")
    outside = Module(ROOT / "tests" / "x.py", OUTSIDE, tree)
    assert list(private_imports(outside)) == [
        "tests/x.py:1 imports alkstore._store",
        "tests/x.py:1 imports alkstore._store.Store",
    ]


def documented_engine_exports() -> list[str]:
    """The names listed in the engine authors' guide's ``engine-exports`` block."""
    guide = (ROOT / "docs" / "engine-authors.md").read_text()
    _, found, rest = guide.partition("```engine-exports\n")
    assert found, "docs/engine-authors.md has no ```engine-exports block"
    block, _, _ = rest.partition("```")
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_alkstore_engine_exports_exactly_what_the_guide_documents() -> None:
    import alkstore.engine

    assert documented_engine_exports() == list(alkstore.engine.__all__)


def test_every_engine_export_is_used_by_an_engine_or_the_suite() -> None:
    """Nothing is exported for core's own sake: each name is imported from
    ``alkstore.engine`` by some engine, the example engine or the contract suite
    (``redact`` is for engines whose targets carry passwords, ours parse theirs;
    ``CommitCursor`` is for engines whose ids are assigned at insert, ours have
    one writer or LISTEN: core's tests prove it on a real PostgreSQL table)."""
    import alkstore.engine

    users = {"alkstore_sqlite", "alkstore_postgres", "alkstore_example_memory"}
    users.add("alkstore_contract_tests")
    imported = {
        alias.name
        for module in MODULES
        if module.distribution in users
        for node in ast.walk(module.tree)
        if isinstance(node, ast.ImportFrom) and node.module == "alkstore.engine"
        for alias in node.names
    }
    assert set(alkstore.engine.__all__) - imported == {"redact", "CommitCursor"}
