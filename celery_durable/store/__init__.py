"""The database layer: tables in ``schema``, every statement in ``store``."""

from .schema import ACTIVE_STATUSES, FINISHED_STATUSES, Tables, build_tables
from .store import Store

__all__ = ["ACTIVE_STATUSES", "FINISHED_STATUSES", "Store", "Tables", "build_tables"]
