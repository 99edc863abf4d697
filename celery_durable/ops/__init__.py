"""What operators use: ``console`` (how runs print: tables, JSON), ``run_details`` (one
run in detail, as ``durable show`` prints it), ``metrics`` (the Prometheus endpoint),
``dashboard/`` (the web UI) and ``operations`` (Durable's list, stats, bulk resume and
gc). It reads runs through ``runs`` and may import everything below it; ``cli.py`` and
``durable.py`` sit above it.
"""
