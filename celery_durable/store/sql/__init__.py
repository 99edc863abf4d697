"""Every SQL statement of the store, by area (``runs``, ``steps``, ``signals``, ...): one
statements class per area, each built once per store by ``statements.Statements`` and held
as ``store.sql.<area>``, each statement named for the operation that runs it. ``build``
holds the building blocks (parameters, the clock, the fencing guard); what differs between
Postgres and SQLite is asked of ``store.db.dialect``.
"""
