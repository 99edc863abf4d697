"""Waits: ``sleep``, ``sleep_until``, ``wait_for_signal`` and queries (``set_state``),
from their statements to the signal queue that wakes a waiting run."""
