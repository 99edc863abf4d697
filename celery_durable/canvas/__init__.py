"""Canvas: what a settled run owes Celery (result backend, links, chords) through the
outbox, and runs started by name (``send_task``)."""
