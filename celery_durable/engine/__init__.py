"""The engine: what turns a Celery delivery into progress. ``delivery`` (claim, replay,
settle), ``settle``, ``rollback``, ``continue_as_new``, ``items`` (fan-out item tasks),
``signals``, ``sweeper`` (the per-worker bootstep that re-dispatches), ``retention``,
``leases`` (the heartbeat), ``queues``, ``taskevents`` (what Flower sees), ``apps`` (which
Durable serves which Celery app) and ``policy`` (is this process shutting down). It may
import ``body``, ``store``, ``core`` and ``errors``.
"""
