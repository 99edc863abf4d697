"""Every Alembic revision reaches Django projects: the app's Django migrations that
upgrade the durable tables name the Alembic head each was written for, and the newest of
them must be the head of the revisions folder. A new Alembic revision fails this test
until a Django migration that upgrades to it is added."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.script import ScriptDirectory

from celery_durable.store.migrations import HERE as ALEMBIC_FOLDER
from tests.support.django import require_django

require_django()

from celery_durable.contrib.django import migrations as app_migrations  # noqa: E402
from celery_durable.contrib.django.tables import upgrade_durable_tables  # noqa: E402


def django_migrations() -> dict[str, ModuleType]:
    return {
        found.name: importlib.import_module(f"{app_migrations.__name__}.{found.name}")
        for found in pkgutil.iter_modules(app_migrations.__path__)
    }


def alembic_head() -> str | None:
    """The head of the revisions folder (read in an Alembic environment: the revisions
    read their table prefix from its config when they are loaded)."""
    config = Config()
    config.set_main_option("script_location", ALEMBIC_FOLDER)
    script = ScriptDirectory.from_config(config)
    with EnvironmentContext(config, script):
        return script.get_current_head()


def upgrades(module: ModuleType) -> bool:
    return any(
        getattr(operation, "code", None) is upgrade_durable_tables
        for operation in module.Migration.operations
    )


def test_the_newest_django_upgrade_brings_the_tables_to_the_alembic_head():
    head = alembic_head()
    named = {
        name: module.ALEMBIC_REVISION
        for name, module in django_migrations().items()
        if hasattr(module, "ALEMBIC_REVISION")
    }
    newest = max(named)
    assert named[newest] == head, (
        f"the Alembic head is {head}, but the newest Django migration that upgrades the "
        f"durable tables, {newest}, was written for {named[newest]}: projects migrated "
        "before would never get the new revision from manage.py migrate. Add a Django "
        "migration to celery_durable/contrib/django/migrations, a copy of "
        f"{newest}.py that depends on the app's latest migration, with "
        f'ALEMBIC_REVISION = "{head}"'
    )


def test_every_migration_that_names_a_revision_runs_the_upgrade():
    named = [m for m in django_migrations().values() if hasattr(m, "ALEMBIC_REVISION")]
    assert named and all(upgrades(module) for module in named)
    assert upgrades(django_migrations()["0001_durable_tables"])  # the first one makes them
