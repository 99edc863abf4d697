"""What operators use: ``console`` (how runs print: tables, JSON), ``metrics`` (the
Prometheus endpoint), ``dashboard/`` (the web UI) and ``operations`` (Durable's list,
stats, bulk resume and gc). It reads runs through ``runs`` and may
import everything below it; ``cli.py`` and ``durable.py`` sit above it.
"""
