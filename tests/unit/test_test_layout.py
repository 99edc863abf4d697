"""The test suite's own layout: no test module imports another (shared builders, fixtures
and runners live in tests/support and conftest.py), and every test module is in
tests/unit or tests/integration."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# What test modules may import from: support code, the worker apps, the shared conftest.
SHARED = ("tests.support", "tests.apps", "tests.conftest")


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside functions (absolute names)."""
    package = ".".join(path.relative_to(TESTS.parent).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's own package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            # ``from tests.integration import test_x`` imports the test module test_x.
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and not name.startswith(SHARED) and parts[-1].startswith("test_")


def test_no_test_module_imports_another() -> None:
    modules = [
        path
        for path in TESTS.rglob("*.py")
        if path.relative_to(TESTS).parts[0] not in ("support", "apps")
        and path.name != "conftest.py"
    ]
    assert len(modules) > 40  # the walk found the suite
    offending = {
        str(path.relative_to(TESTS.parent)): sorted(filter(is_test_module, imported_modules(path)))
        for path in modules
    }
    assert {path: names for path, names in offending.items() if names} == {}


def test_every_test_module_is_a_unit_or_an_integration_test() -> None:
    stray = [
        str(path.relative_to(TESTS.parent))
        for path in TESTS.rglob("test_*.py")
        if path.relative_to(TESTS).parts[0] not in ("unit", "integration")
    ]
    assert stray == []
