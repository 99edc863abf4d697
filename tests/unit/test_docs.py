"""The docs site (mkdocs.yml, docs/): it builds with no warning, works offline, its reference
holds every public name, setting and CLI command, and its Python blocks use names that exist.

Blocks that claim to run are included from files under examples/ (``--8<-- "examples/x.py"``),
which tests/integration runs; the other Python blocks are fragments, parsed here and checked
name by name against the package, so a renamed API breaks this test rather than the docs.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from celery import Celery

import celery_durable
from celery_durable import Durable, WorkflowHandle
from celery_durable.cli import durable as durable_group
from celery_durable.core.settings import SETTINGS
from tests.support.workers import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
# A Python fence, its info string (``python title="x"``) and its body.
FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
INCLUDE = re.compile(r'--8<--\s+"(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"')
# Settings read from app.conf only, with no Setting row (and so no env var).
APP_CONF_ONLY = ("durable_redact",)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert warnings == []
    return out


def test_the_site_builds_strictly_with_search_and_nothing_from_the_network(site: Path) -> None:
    index = site / "search" / "search_index.json"
    assert index.exists() and index.stat().st_size > 10_000
    remote = re.compile(r"""<(?:script|link|img)[^>]+(?:src|href)=["']https?://""")
    offending = {
        str(page.relative_to(site)): remote.findall(page.read_text())
        for page in site.rglob("*.html")
    }
    assert {page: found for page, found in offending.items() if found} == {}
    assert not list(site.rglob("*.md")), "a Markdown file was copied instead of rendered"


def test_every_setting_is_in_the_reference(site: Path) -> None:
    page = (site / "reference" / "settings" / "index.html").read_text()
    names = [f"durable_{setting.name}" for setting in SETTINGS] + list(APP_CONF_ONLY)
    assert [name for name in names if name not in page] == []
    envs = [f"CELERY_DURABLE_{setting.name.upper()}" for setting in SETTINGS]
    assert [env for env in envs if env not in page] == []


def test_every_app_conf_key_the_package_reads_is_a_setting() -> None:
    read = set()
    for path in (ROOT / "celery_durable").rglob("*.py"):
        read |= set(
            re.findall(r"""conf(?:\.get\(|\[)["'](durable_[a-z_]+)["']""", path.read_text())
        )
    known = {f"durable_{setting.name}" for setting in SETTINGS} | set(APP_CONF_ONLY)
    assert read and read <= known, read - known


def declared_all(module: str) -> list[str]:
    """``module.__all__``, read from its source (Django's modules can't be imported here)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module} has no __all__")


def defined_here(module: str) -> set[str]:
    path = ROOT / (module.replace(".", "/") + ".py")
    return {
        node.name
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }


def public_names() -> Iterator[str]:
    yield from (f"celery_durable.{name}" for name in celery_durable.__all__)
    for module in ("celery_durable.testing", "celery_durable.contrib.django.testing"):
        own = defined_here(module)  # what it re-exports is documented where it is defined
        yield from (f"{module}.{name}" for name in declared_all(module) if name in own)


def test_every_public_name_is_in_the_reference(site: Path) -> None:
    anchors = set()
    for page in (site / "reference").rglob("*.html"):
        anchors |= set(re.findall(r'id="(celery_durable[\w.]*)"', page.read_text()))
    missing = [name for name in public_names() if name not in anchors]
    assert missing == []


def test_every_cli_command_is_in_the_reference(site: Path) -> None:
    page = (site / "reference" / "cli" / "index.html").read_text()
    commands = list(durable_group.commands)
    assert len(commands) > 10
    missing = [name for name in commands if f"durable {name}" not in page]
    assert missing == []
    for name, command in durable_group.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[-1] in page, f"durable {name} {param.opts[-1]}"


def test_the_architecture_map_lists_every_module(site: Path) -> None:
    page = (site / "architecture" / "index.html").read_text()
    modules = [
        path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        for path in (ROOT / "celery_durable").rglob("*.py")
        if path.name != "__init__.py" and "migrations" not in path.parts
    ]
    assert len(modules) > 100
    assert [module for module in modules if f"<code>{module}</code>" not in page] == []


def test_no_page_is_left_a_draft() -> None:
    assert [str(page) for page in PAGES if "DRAFT" in page.read_text()] == []


def test_the_readme_is_a_landing_page_whose_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\((?!https?://|#)([^)#]+)", readme)
    assert links, "the README links into the docs"
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_the_home_page_shows_the_readmes_tested_example() -> None:
    """The README's first block is run by tests/integration/test_examples.py; the home page
    shows the same program."""
    readme = next(body for where, body in python_blocks() if where.startswith("README"))
    home = next(body for where, body in python_blocks() if where.startswith("docs/index.md"))
    assert home == readme


def python_blocks() -> Iterator[tuple[str, str]]:
    for page in [*PAGES, ROOT / "README.md"]:
        for match in FENCE.finditer(page.read_text()):
            body = "\n".join(line[len(match["indent"]) :] for line in match["body"].splitlines())
            yield f"{page.relative_to(ROOT)}:{match.start()}", body


def included(body: str) -> list[tuple[str, str | None]]:
    return [(found["path"], found["section"]) for found in INCLUDE.finditer(body)]


def test_every_included_example_exists_and_is_run_by_a_test() -> None:
    tests = "\n".join(path.read_text() for path in (ROOT / "tests").rglob("test_*.py"))
    for where, body in python_blocks():
        for path, section in included(body):
            source = ROOT / path
            assert source.exists(), f"{where} includes {path}, which does not exist"
            if section:
                text = source.read_text()
                assert f"[start:{section}]" in text and f"[end:{section}]" in text, where
            if path.startswith("examples/"):
                assert Path(path).name in tests, f"{where}: no test runs {path}"


def durable_instance() -> Durable:
    return Durable(Celery("docs-check", set_as_current=False), database_url="sqlite://")


# What the conventional names of the docs stand for: the package, a Durable, a run's handle.
RECEIVERS = {"cd": celery_durable, "celery_durable": celery_durable}


def unknown_names(body: str, durable: Durable) -> list[str]:
    tree = ast.parse(body)
    unknown = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("celery_durable"):
            module = importlib.import_module(node.module)  # type: ignore[arg-type]
            unknown += [
                f"{node.module}.{alias.name}"
                for alias in node.names
                if not hasattr(module, alias.name)
                and importlib.util.find_spec(f"{node.module}.{alias.name}") is None
            ]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("celery_durable"):
                    importlib.import_module(alias.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = node.value.id
            if owner in RECEIVERS and not hasattr(RECEIVERS[owner], node.attr):
                unknown.append(f"{owner}.{node.attr}")
            elif owner == "durable" and not hasattr(durable, node.attr):
                unknown.append(f"durable.{node.attr}")
            elif owner == "handle" and not hasattr(WorkflowHandle, node.attr):
                unknown.append(f"handle.{node.attr}")
    return unknown


def test_every_python_block_parses_and_names_only_what_exists() -> None:
    durable = durable_instance()
    problems = {}
    blocks = list(python_blocks())
    assert len(blocks) > 10
    for where, body in blocks:
        if included(body):
            continue
        try:
            found = unknown_names(body, durable)
        except SyntaxError as exc:
            found = [f"does not parse: {exc}"]
        if found:
            problems[where] = found
    assert problems == {}
