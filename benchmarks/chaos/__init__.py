"""The chaos suite, ``python -m benchmarks.chaos``: workflows under worker kills, broker and
Postgres outages and paused workers, judged against a ledger kept outside the store.

What lives here, from the top down:

- ``cli``: the command line, one broker per process (``--broker both`` runs a child each);
- ``run``: one broker's run (proxies, workers, starts and signals on the agenda, verdict);
- ``faults``: the agenda and the fault injector (its own thread);
- ``signals``: the driver's signals, and when one is sent again;
- ``workers``: the worker subprocesses and the broker/database housekeeping of a run;
- ``verdict``: what the store and the ledger say, and the counters judged from it;
- ``proxy``: the TCP proxy in front of Postgres and the broker, which makes the outages;
- ``plan``: the seeded plan of workflows, signals and faults (pure);
- ``app``: the Celery app the workers run (``-A benchmarks.chaos.app``), configured from
  the environment the driver sets.

What it may import: ``celery_durable``, these modules of its own, and the shared helpers
of ``tests.support`` (which imports nothing from ``benchmarks``). ``plan`` imports none of
the others and ``app`` only ``plan``: the workers import ``app``, the test ``plan`` and
``verdict``. Nothing else in ``benchmarks`` imports this package.
"""
