"""Every SQL statement of the kernel's store, and the wings' not yet in a store area: one
statements class per group (``sql/<group>.py``), each built once per store and held as
``store.sql.<group>``. A store area builds its wing's statements itself (``store.areas``).

Each attribute is named after the operation that runs it (a ``Store`` method, or for a
method that runs several, ``<method>_<part>``). Building them once lets SQLAlchemy's
compiled cache (and the psycopg fast path) serve every call. Bind names carry a ``p_``
prefix, since SQLAlchemy reserves column names in VALUES/SET.

Example::

    sql = Statements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.runs.claim_run       # UPDATE ... RETURNING fence, attempts, ...
"""

from __future__ import annotations

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.actions import ActionStatements
from celery_durable.store.sql.carry import CarryStatements
from celery_durable.store.sql.liveness import LivenessStatements
from celery_durable.store.sql.metrics import MetricStatements
from celery_durable.store.sql.operator_statements import AdminStatements
from celery_durable.store.sql.reads import ReadStatements
from celery_durable.store.sql.runs import RunStatements
from celery_durable.store.sql.steps import StepStatements
from celery_durable.store.sql.sweep import SweepStatements


class Statements:
    """All statements of one store (tables, dialect, namespace, the app's broker)."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, dispatcher: str | None = None
    ) -> None:
        self.runs = RunStatements(tables, dialect, namespace, dispatcher)
        self.steps = StepStatements(tables, dialect, namespace)
        self.carry = CarryStatements(tables, dialect, namespace, self.runs)
        self.sweep = SweepStatements(tables, dialect, namespace, dispatcher)
        self.admin = AdminStatements(tables, dialect, namespace, dispatcher)
        self.actions = ActionStatements(tables, dialect, namespace)
        self.reads = ReadStatements(tables, dialect, namespace)
        self.metrics = MetricStatements(tables, dialect, namespace)
        self.liveness = LivenessStatements(tables, dialect, namespace)
        self.notify = self.runs.notify
