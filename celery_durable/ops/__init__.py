"""What operators use: ``console`` (how runs print: tables, JSON), ``metrics`` (the
Prometheus endpoint) and ``dashboard/`` (the web UI). It reads runs through ``runs`` and may
import everything below it; ``cli.py`` and ``durable.py`` sit above it.
"""
