"""The engine: what turns a Celery delivery into progress. ``runtime`` (the Runtime: what
the engine needs of a Durable, which every module here takes instead of one; the parts it
holds take ``runtime_view.RuntimeView``, what they use of it, so none imports it back),
``definition`` (a registered workflow), ``publish``
(publish, or leave it to the sweeper; item tasks and wake-ups), ``delivery`` (claim, replay,
settle), ``settle``, ``rollback``, ``continue_as_new``, ``items`` (fan-out item tasks),
``signals``, ``sweeper`` (re-dispatches, per worker), ``bootstep`` (the worker bootstep that
runs the sweepers), ``retention``,
``leases`` (the heartbeat), ``liveness`` (taking over a dead owner's runs before its lease
ends, and keeping this process's proof of life), ``queues``, ``taskevents`` (what Flower
sees), ``apps`` (which Runtime serves which Celery app) and ``shutdown`` (is this process
shutting down). It may
import ``body``, ``store``, ``core`` and ``errors``.
"""
