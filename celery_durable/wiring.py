"""Wiring: which wings a Durable's kernel runs with, and where each plugs in. The one place
that names them all; ``Durable`` calls ``wire`` with its Runtime.

The kernel imports no wing (the import contracts check it): a wing reaches a delivery
through the delivery hooks and step guards, a settle through the settle listeners, the
sweep through its ordered passes, a run handle through the handle hooks, and the operator
tools (dashboard, metrics) through the wing parts. Their operations are ``Durable``'s bases.

Example::

    wire(runtime)        # in Durable.__init__
"""

from __future__ import annotations

from celery import Celery

from celery_durable.body.step import Step
from celery_durable.canvas import by_name
from celery_durable.canvas import reports as canvas
from celery_durable.canvas.listeners import OwedReports, Report
from celery_durable.canvas.outbox import CANVAS
from celery_durable.engine import deadlines
from celery_durable.engine.bootstep import DurableSweeper
from celery_durable.engine.guard import DeliveryGuard
from celery_durable.engine.runtime import Runtime
from celery_durable.engine.runtime_view import SweepPass
from celery_durable.fanout import compose
from celery_durable.fanout.item_tasks import revoke_item
from celery_durable.fanout.store_area import FANOUT
from celery_durable.fanout.sweep import ItemSweep
from celery_durable.limiters import run_slots as limits
from celery_durable.limiters.limiter import LimiterGuard
from celery_durable.limiters.report import LIMITERS_SECTION
from celery_durable.limiters.store_area import LIMITERS
from celery_durable.ops.wing_parts import WING_PARTS
from celery_durable.runs import starting
from celery_durable.runs.handle_hooks import HANDLE_HOOKS
from celery_durable.sagas import continued as continue_as_new
from celery_durable.sagas import rollback
from celery_durable.sagas.compensation import MarkCompensable
from celery_durable.sagas.store import SAGAS
from celery_durable.schedules import declared as schedules
from celery_durable.schedules.dashboard import SCHEDULE_ACTIONS, SCHEDULES_PAGE
from celery_durable.schedules.firing import SchedulePass
from celery_durable.schedules.report import SCHEDULE_LAG
from celery_durable.schedules.store import SCHEDULES
from celery_durable.store.areas import STORE_AREAS
from celery_durable.streams.dashboard import STREAM_EVENTS
from celery_durable.streams.reading import aread_stream, read_stream
from celery_durable.streams.report import STREAMS_PART
from celery_durable.streams.store_area import STREAMS
from celery_durable.streams.writing import CloseStreams
from celery_durable.updates.receive import note_validators
from celery_durable.updates.report import UPDATES_PART
from celery_durable.updates.send import look_for_answer, send_update, wake_updated_runs
from celery_durable.updates.store_area import UPDATES
from celery_durable.waits.signals import SignalQueue, register_tasks, send_signal
from celery_durable.waits.state import look_for_state, query, wait_for_state
from celery_durable.waits.store_area import WAITS

# The wings' store areas, the wings behind a run handle's verbs, and their parts of the
# operator tools: the dashboard's pages, sections and actions, the metrics endpoint's
# gauges. Every Durable of a process has the same wings, so these are the process's.
STORE_AREAS.add(WAITS)  # every Store built after this holds ``store.waits``
STORE_AREAS.add(CANVAS)  # ``store.canvas``
STORE_AREAS.add(SAGAS)  # ``store.sagas``
STORE_AREAS.add(SCHEDULES)  # ``store.schedules``
STORE_AREAS.add(LIMITERS)  # ``store.limiters``
STORE_AREAS.add(FANOUT)  # ``store.fanout``
STORE_AREAS.add(STREAMS)  # ``store.streams``
STORE_AREAS.add(UPDATES)  # ``store.updates``
HANDLE_HOOKS.signal = send_signal
HANDLE_HOOKS.query = query
HANDLE_HOOKS.wait_for_state = wait_for_state
HANDLE_HOOKS.look_for_state = look_for_state
HANDLE_HOOKS.read_stream = read_stream
HANDLE_HOOKS.aread_stream = aread_stream
HANDLE_HOOKS.send_update = send_update
HANDLE_HOOKS.look_for_answer = look_for_answer
WING_PARTS.add_page(SCHEDULES_PAGE)
WING_PARTS.add_actions(SCHEDULE_ACTIONS)
WING_PARTS.add_section(LIMITERS_SECTION)
WING_PARTS.add_gauge(SCHEDULE_LAG)
WING_PARTS.add_run_part(STREAMS_PART)
WING_PARTS.add_events(STREAM_EVENTS)
WING_PARTS.add_run_part(UPDATES_PART)


def wire(runtime: Runtime, app: Celery) -> None:
    """Plug the wings into ``runtime``'s kernel, and the worker's parts into ``app``;
    once per Runtime (a second call would run every hook twice)."""
    if runtime.hooks.settle_listeners:
        raise RuntimeError(f"{runtime!r} is wired already")
    kernel = runtime.kernel_passes
    runtime.sweep_passes[:] = [  # the sweep's order, each wing's passes among the kernel's
        kernel["due runs"],
        kernel["signalled runs"],
        SweepPass(
            "updated runs", lambda: wake_updated_runs(runtime, runtime.sweeper.publish_again)
        ),
        SweepPass("items", ItemSweep(runtime, runtime.sweeper)),
        SweepPass("limiter slots", lambda: limits.hand_off_slots(runtime)),
        kernel["deadlines"],
        SweepPass("owed reports", OwedReports(runtime), publishes=False),
        kernel["revokes"],
        kernel["retention"],
        SweepPass("schedules", SchedulePass(runtime)),
    ]
    runtime.sweeper.revoke_handlers.append(lambda task_id: revoke_item(runtime, task_id))
    hooks = runtime.hooks  # each feature's delivery hooks and step guards
    hooks.claim_variants.append(limits.claim_variant)
    hooks.claim_fallbacks += [starting.claim_when_visible, by_name.claim_started_by_name]
    hooks.claimed.append(by_name.settle_refused)
    # Order matters: the canvas is known before a rollback reports, and the slot argument
    # and the priority before the run's slot is taken (its key, its place among waiters).
    hooks.before_body += [canvas.report_claimed, schedules.slot_argument, deadlines.note_deadline]
    hooks.before_body += [limits.note_priority, rollback.roll_back_instead, limits.run_slot]
    hooks.before_body.append(note_validators)  # returns nothing to give back
    hooks.body_stopped.append(limits.give_back_on_stop)
    hooks.settle_listeners += [Report(), continue_as_new.Continued(), rollback.Saga()]
    hooks.settle_listeners.append(CloseStreams())
    hooks.step_guards += [LimiterGuard(), deadlines.TerminateAtDeadline(), MarkCompensable()]
    starts = runtime.start_hooks  # each feature's part in a run's start
    starts.insert_variants.append(limits.insert_variant)
    starts.encode_canvas, starts.take_canvas = canvas.encode_start, canvas.neutralise
    starts.start_by_name, starts.start_child = by_name.start_by_name, compose.start_child
    Step.starter = compose.start_step  # step.start(), the same for every Durable's steps
    app.steps["worker"].add(DurableSweeper)
    app.steps["worker"].add(SignalQueue)
    app.steps["consumer"].add(DeliveryGuard)
    register_tasks(app)
