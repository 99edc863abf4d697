"""Long-lived workflows: sagas' compensations and rollback, and ``continue_as_new``."""
