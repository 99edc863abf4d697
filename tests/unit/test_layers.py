"""The import-linter contract: layers import one way (see pyproject.toml)."""

from __future__ import annotations

import re
import shutil
import subprocess

import grimp
import tomllib

from tests.support.workers import ROOT


def test_layers_import_one_way():
    lint_imports = shutil.which("lint-imports")
    assert lint_imports, "import-linter is part of the [test] extra"
    done = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert f"{len(contracts['contracts'])} kept, 0 broken" in done.stdout


def test_every_module_of_a_layered_folder_is_in_its_contract():
    """A folder with a contract of its own names each of its modules in it: a module
    left out would be bound by no layer of its folder."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    left_out = {}
    for contract in contracts["contracts"]:
        for container in contract.get("containers", []):
            if container == "celery_durable":
                continue  # the folders themselves, each a layer
            folder = ROOT / container.replace(".", "/")
            named = set(re.findall(r"\w+", " ".join(contract["layers"])))
            modules = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
            modules |= {path.parent.name for path in folder.glob("*/__init__.py")}
            if modules - named:
                left_out[container] = sorted(modules - named)
    assert left_out == {}


def test_no_module_imports_itself_back():
    """No import cycle between modules, counting imports made inside functions (a deferred
    import hides a cycle, it doesn't remove one) and those under TYPE_CHECKING (an
    annotation that names a module above is a dependency on it all the same: the Runtime's
    parts take ``engine.runtime_view.RuntimeView``, not the Runtime); each cycle is listed
    with its modules."""
    graph = grimp.build_graph(
        "celery_durable",
        include_external_packages=False,
        exclude_type_checking_imports=False,
        cache_dir=None,  # a cache keyed by mtime can miss an edit made within the second
    )
    cycles = import_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


KERNEL = ("core", "store", "body", "engine", "runs", "ops")
WINGS = ("canvas", "fanout", "limiters", "sagas", "schedules", "streams", "updates", "waits")


def test_the_kernel_imports_no_wing():
    """No kernel module imports a wing module, counting imports inside functions and under
    TYPE_CHECKING; and the kernel's contract excuses none (its ``ignore_imports`` is
    empty), so a new one fails ``lint-imports`` too. A wing plugs in through the hooks
    that ``wiring.py`` registers."""
    graph = grimp.build_graph(
        "celery_durable",
        include_external_packages=False,
        exclude_type_checking_imports=False,
        cache_dir=None,
    )
    reaches = sorted(
        f"{importer} -> {imported}"
        for importer in graph.modules
        if importer.split(".")[1:2] and importer.split(".")[1] in KERNEL
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported.split(".")[1:2] and imported.split(".")[1] in WINGS
    )
    assert reaches == []
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [kernel] = [c for c in contracts["contracts"] if c["name"].startswith("The kernel imports")]
    assert sorted(kernel["source_modules"]) == sorted(f"celery_durable.{k}" for k in KERNEL)
    assert sorted(kernel["forbidden_modules"]) == sorted(f"celery_durable.{w}" for w in WINGS)
    assert kernel.get("ignore_imports", []) == []


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    imported_by = graph.find_modules_directly_imported_by
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(imported_by(module)):
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in order:
            visit(module)
    return cycles
