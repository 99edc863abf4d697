"""What a run tells Celery when it settles: its result backend's final state, its link
callbacks and errbacks, the rest of its chain, its chord's part.

A plain task's worker does this when the task's one message ends. A run outlives its first
message (suspensions, retries, recoveries, re-dispatches), so the canvas of the start is
stored with the run (``runs.canvas``, as JSON) and reported when the run settles for good:
by the worker that settled it, right after the settle's commit, or, when that worker died
before it could, by the sweeper (the run's outbox entry, ``runs.outbox_at``, written by the
settle's own statement).

The order is Celery's tracer's, with one change: callbacks, errbacks and the next chain
link are published first, and the backend's final state is stored last, so that a stored
final state proves the report was made. A sweeper that finds it there only clears the
entry, and never publishes the callbacks again.

Example::

    canvas = Canvas.from_options(app, options)     # at the start: link=, chain=, chord=, ...
    report_finished(runtime, owed)                 # after the settle: backend, callbacks
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from celery import group, signature, states
from celery.app.task import Context
from celery.backends.base import BaseKeyValueStoreBackend, DisabledBackend
from celery.exceptions import TaskRevokedError
from celery.utils.serialization import create_exception_cls
from kombu.utils.json import dumps, loads

from celery_durable.canvas.outbox import CANVAS
from celery_durable.core import faults, serialization
from celery_durable.core.logs import run_fields
from celery_durable.errors import WorkflowCancelled
from celery_durable.store import OwedReport
from celery_durable.store.engine_names import CELERY_STATES

if TYPE_CHECKING:
    from celery import Celery

    from celery_durable.body.context import WorkflowContext
    from celery_durable.engine.hooks import Delivery
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.canvas")
WING = "canvas"  # a run's canvas (as stored) among its context's wing states


@dataclasses.dataclass(frozen=True)
class Canvas:
    """A run's place in Celery's canvas, and whether its outcome goes to the backend.

    ``chain`` is Celery's: the tasks after this one, reversed (the next is the last).
    """

    report: bool = False
    callbacks: tuple[dict[str, Any], ...] = ()
    errbacks: tuple[dict[str, Any], ...] = ()
    chain: tuple[dict[str, Any], ...] = ()
    chord: dict[str, Any] | None = None
    group: str | None = None
    group_index: int | None = None
    root_id: str | None = None
    parent_id: str | None = None
    reply_to: str | None = None

    @classmethod
    def from_options(cls, app: Celery, options: dict[str, Any]) -> Canvas:
        """The canvas options of an ``apply_async`` (removed from ``options``): ``link``,
        ``link_error``, ``chain``, ``chord``, ``group_id``, ``group_index``,
        ``ignore_result``; the root and parent ids are read, and stay for the message."""
        ignore = options.pop("ignore_result", None)
        parent = app.current_worker_task
        root_id = options.get("root_id")
        parent_id = options.get("parent_id")
        if parent is not None and not (root_id and parent_id):
            # As send_task does: a run started from a task's body is its child.
            root_id = root_id or parent.request.root_id or parent.request.id
            parent_id = parent_id or parent.request.id
        return cls(
            report=_reports(app, ignore),
            callbacks=_signatures(options.pop("link", None)),
            errbacks=_signatures(options.pop("link_error", None)),
            chain=_signatures(options.pop("chain", None)),
            chord=_signature_or_none(options.pop("chord", None)),
            group=options.pop("group_id", None),
            group_index=options.pop("group_index", None),
            root_id=root_id,
            parent_id=parent_id,
            reply_to=options.get("reply_to"),
        )

    @classmethod
    def from_request(cls, app: Celery, request: Any) -> Canvas:
        """The canvas a message carried (a run started by name: ``send_task``, ``celery
        call``, beat, another language's client)."""
        return cls(
            report=_reports(app, getattr(request, "ignore_result", None)),
            callbacks=_signatures(request.callbacks),
            errbacks=_signatures(request.errbacks),
            chain=_signatures(request.chain),
            chord=_signature_or_none(request.chord),
            group=request.group,
            group_index=request.group_index,
            root_id=request.root_id,
            parent_id=request.parent_id,
            reply_to=request.reply_to,
        )

    def encode(self, owner: str) -> str | None:
        """JSON for ``runs.canvas``; None when there is nothing to report (no backend, no
        callbacks): such a run costs nothing when it settles."""
        if not (self.report or self.callbacks or self.errbacks or self.chain or self.chord):
            return None
        fields = {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, (), [])}
        try:
            return str(dumps(fields))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{owner}: its callbacks or chain can't be stored: {exc}") from None

    @classmethod
    def decode(cls, text: str) -> Canvas:
        fields = loads(text)
        for name in ("callbacks", "errbacks", "chain"):
            fields[name] = tuple(fields.get(name) or ())
        return cls(**fields)

    def request(self, run_id: str, name: str) -> Context:
        """The request Celery's backend reads to store the state and report the chord."""
        return Context(
            id=run_id,
            task=name,
            root_id=self.root_id or run_id,
            parent_id=self.parent_id,
            group=self.group,
            group_index=self.group_index,
            chord=self.chord,
            callbacks=list(self.callbacks),
            errbacks=list(self.errbacks),
            chain=list(self.chain),
            reply_to=self.reply_to,
            correlation_id=run_id,
            ignore_result=not self.report,
            delivery_info={},
        )


def _reports(app: Celery, ignore_result: Any) -> bool:
    if isinstance(app.backend, DisabledBackend):
        return False
    if ignore_result is None:
        ignore_result = app.conf.task_ignore_result
    return not ignore_result


def _signatures(value: Any) -> tuple[dict[str, Any], ...]:
    if not value:
        return ()
    if isinstance(value, dict):  # one signature (a Signature is a dict)
        value = [value]
    return tuple(dict(sig) for sig in value)


def _signature_or_none(value: Any) -> dict[str, Any] | None:
    return dict(value) if value else None


def encode_start(app: Celery, options: dict[str, Any], owner: str) -> str | None:
    """A start hook: the canvas options of an ``apply_async`` (``Canvas.from_options``),
    taken out of ``options`` and encoded for the run's row."""
    return Canvas.from_options(app, options).encode(owner)


def neutralise(app: Celery, request: Any) -> Canvas:
    """Take the canvas out of a delivery's request, so that Celery's tracer neither fires
    it nor stores a result when this one message ends: the run does both when it settles.
    Returns what the message carried, for a run started by name (``send_task``)."""
    carried = Canvas.from_request(app, request)
    for key in ("callbacks", "errbacks", "chain", "chord"):
        setattr(request, key, None)
    request.ignore_result = True
    return carried


def report_settled(runtime: RuntimeView, owed: OwedReport) -> None:
    """Right after the settle that finished a run with a canvas: report it, and clear its
    outbox entry. With a backend the clear waits for the next lease beat, in a batch (the
    stored state proves the report meanwhile): no commit of its own."""
    if owed.status == "CANCELLED" and owed.cancel_reason is None:
        run = runtime.store.get_run(owed.id)  # a rare path: the reason is the row's
        if run is not None:
            owed = dataclasses.replace(owed, cancel_reason=run.cancel_reason)
    canvas = Canvas.decode(owed.canvas or "{}")
    if not report_finished(runtime, owed, canvas):
        return
    if canvas.report:
        runtime.leases.reported(owed.id)
    else:
        CANVAS.of(runtime.store).clear_reported([owed.id])


def report_taken(runtime: RuntimeView, run_id: str) -> None:
    """Report a run that a cancel (or a refusal) just finished, outside any delivery: its
    entry is taken, the report made, the entry cleared at once."""
    owed = CANVAS.of(runtime.store).take_owed_report(run_id)
    if owed is not None and report_finished(runtime, owed, Canvas.decode(owed.canvas or "{}")):
        CANVAS.of(runtime.store).clear_reported([owed.id])


def report_owed(runtime: RuntimeView, owed: OwedReport) -> str | None:
    """The sweeper's report of an entry still owed: "found" when the backend shows it was
    made (its worker died before clearing it), "made" when made now; None when that
    failed (due again a grace later)."""
    canvas = Canvas.decode(owed.canvas or "{}")
    if canvas.report:
        expected = CELERY_STATES.get(owed.status)
        try:
            stored = runtime.app.backend.get_task_meta(owed.id).get("status")
        except Exception:  # noqa: BLE001 - the backend is down: due again after a grace
            logger.warning("could not read the state of run %s", owed.id, exc_info=True)
            return None
        if stored == expected:
            # Stored last, the state proves the callbacks and the chain were published,
            # but the backend records a chord part after the state: that part again.
            return "found" if _chord_part_again(runtime, owed, canvas) else None
    return "made" if report_finished(runtime, owed, canvas) else None


def _chord_part_again(runtime: RuntimeView, owed: OwedReport, canvas: Canvas) -> bool:
    """Record a chord member's part again, where the backend records each member once
    (the Redis backend's chord-part script, as in Celery 5.7, keeps the members it has
    seen; checked by that script's presence). Elsewhere a second
    part could complete the chord early, so it is not made again: a worker that dies
    between the state and the part leaves that chord waiting (see the README)."""
    backend = runtime.app.backend
    if canvas.chord is None or not _records_each_part_once(backend):
        return True
    outcome = outcome_of(owed)
    if outcome is None:
        return True
    request = canvas.request(owed.id, owed.name)
    try:
        backend.on_chord_part_return(request, outcome.state, outcome.value)
    except Exception:  # noqa: BLE001 - the backend is down: due again after a grace
        logger.warning("could not record run %s's chord part", owed.id, exc_info=True)
        return False
    return True


def _records_each_part_once(backend: Any) -> bool:
    # Not imported here: it needs the redis package, which a Redis backend has loaded.
    module = sys.modules.get("celery.backends.redis")
    return (
        module is not None
        and isinstance(backend, module.RedisBackend)
        and hasattr(module, "CHORD_PART_RETURN_LUA")
    )


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A settled run as Celery's backend records it: its state, its value (the result, or
    the exception) and its traceback."""

    state: str
    value: Any
    trace: str | None = None


def outcome_of(owed: OwedReport) -> Outcome | None:
    """What the outbox entry ``owed`` reports; None for a run resumed since it settled."""
    if owed.status == "SUCCEEDED":
        value = serialization.loads(owed.result) if owed.result is not None else None
        return Outcome(states.SUCCESS, value)
    if owed.status == "FAILED":
        decoded = serialization.decode_error(owed.error) if owed.error else {}
        return Outcome(states.FAILURE, rebuilt_error(decoded), decoded.get("traceback") or None)
    if owed.status == "CANCELLED":
        return Outcome(states.REVOKED, TaskRevokedError(owed.cancel_reason or "cancelled"))
    return None


def report_finished(runtime: RuntimeView, owed: OwedReport, canvas: Canvas) -> bool:
    """Report a run that finished: publish its callbacks (or errbacks) and the next link
    of its chain, then store its final state. False (logged) when that failed: the entry
    stays owed, and the sweeper reports the run again after the dispatch grace."""
    try:
        outcome = outcome_of(owed)  # None: resumed since it settled; its next settle reports
        if outcome is None:
            pass
        elif outcome.state == states.SUCCESS:
            _succeeded(runtime.app, owed.id, owed.name, canvas, outcome.value)
        elif outcome.state == states.FAILURE:
            _failed(runtime.app, owed.id, owed.name, canvas, outcome)
        else:
            _cancelled(runtime.app, owed.id, owed.name, canvas, owed.cancel_reason)
    except Exception:  # noqa: BLE001 - the run is settled; its report is retried
        logger.warning(
            "workflow %s run %s: could not report its %s to Celery (result backend, "
            "callbacks); the sweeper tries again after the dispatch grace",
            owed.name,
            owed.id,
            owed.status,
            exc_info=True,
            extra=run_fields(owed.id, owed.name),
        )
        return False
    return True


def report_started(runtime: RuntimeView, ctx: WorkflowContext) -> None:
    """STARTED, for ``app.AsyncResult``, when a run that reports is claimed again after it
    waited or failed an attempt (the backend may say WAITING or RETRY), or at every claim
    with ``task_track_started``; a first claim otherwise stores nothing (Celery's own
    default: PENDING until it ends)."""
    if not (ctx.history or runtime.app.conf.task_track_started):
        return
    if Canvas.decode(ctx.wings.get(WING) or "{}").report:
        meta = {"pid": os.getpid(), "hostname": socket.gethostname()}
        store_state(runtime, ctx.run_id, ctx.workflow_name, meta, states.STARTED)


def report_claimed(delivery: Delivery) -> None:
    """Before the body (a delivery hook): a run that reports keeps its canvas; STARTED."""
    if (claim := delivery.claim) is not None and claim.canvas is not None:
        delivery.wings[WING] = claim.canvas
        report_started(delivery.runtime, delivery.ctx)


def store_state(runtime: RuntimeView, run_id: str, name: str, result: Any, state: str) -> None:
    """A state that isn't final; never fails the delivery (a monitor's view: the final
    state is the one the outbox owes)."""
    try:
        runtime.app.backend.store_result(
            run_id, result, state, request=Context(id=run_id, task=name)
        )
    except Exception:  # noqa: BLE001
        logger.warning("could not store state %s of run %s", state, run_id, exc_info=True)


def _succeeded(app: Celery, run_id: str, name: str, canvas: Canvas, value: Any) -> None:
    request = canvas.request(run_id, name)
    root_id = request.root_id
    callbacks = [signature(sig, app=app) for sig in canvas.callbacks]
    if len(callbacks) == 1:
        callbacks[0].apply_async((value,), parent_id=run_id, root_id=root_id)
    elif callbacks:
        # As Celery's tracer: groups on their own, the other callbacks as one group.
        groups = [sig for sig in callbacks if isinstance(sig, group)]
        plain = [sig for sig in callbacks if not isinstance(sig, group)]
        for callback_group in groups:
            callback_group.apply_async((value,), parent_id=run_id, root_id=root_id)
        if plain:
            group(plain, app=app).apply_async((value,), parent_id=run_id, root_id=root_id)
    if canvas.chain:
        following = signature(canvas.chain[-1], app=app)
        following.apply_async(
            (value,), chain=list(canvas.chain[:-1]), parent_id=run_id, root_id=root_id
        )
    _store_success(app.backend, run_id, value, request)


def _store_success(backend: Any, run_id: str, value: Any, request: Context) -> None:
    """``backend.mark_as_done``, in one round trip on a key-value backend (Redis): its
    ``store_result`` reads the key first, so that a duplicate plain task never overwrites a
    SUCCESS; a run settles once (its outcome is fenced in the database), so the read
    would only cost a round trip."""
    if not isinstance(backend, BaseKeyValueStoreBackend) or request.ignore_result:
        backend.mark_as_done(run_id, value, request)
        return
    state = states.SUCCESS
    meta = backend._get_result_meta(
        result=backend.encode_result(value, state), state=state, traceback=None, request=request
    )
    meta["task_id"] = run_id
    backend._set_with_state(backend.get_key_for_task(run_id), backend.encode(meta), state)
    if request.chord:
        faults.reach(faults.BEFORE_CHORD_PART, run_id=run_id)
        backend.on_chord_part_return(request, state, value)


def _failed(app: Celery, run_id: str, name: str, canvas: Canvas, outcome: Outcome) -> None:
    request = canvas.request(run_id, name)
    if canvas.errbacks:
        app.backend._call_task_errbacks(request, outcome.value, outcome.trace)
    app.backend.mark_as_failure(
        run_id,
        outcome.value,
        outcome.trace,
        request,
        store_result=canvas.report,
        call_errbacks=False,
    )


def _cancelled(app: Celery, run_id: str, name: str, canvas: Canvas, reason: str | None) -> None:
    request = canvas.request(run_id, name)
    if canvas.errbacks:
        # Celery's link_error, with the run's own cancellation.
        app.backend._call_task_errbacks(request, WorkflowCancelled(run_id, reason), None)
    text = reason or "cancelled"
    app.backend.mark_as_revoked(run_id, text, request, store_result=canvas.report)
    if canvas.chain:
        # The rest of its chain never runs: as a failed link's, their results say so.
        app.backend._fail_chain(list(canvas.chain), TaskRevokedError(text), state=states.REVOKED)


def rebuilt_error(decoded: dict[str, Any]) -> BaseException:
    """The run's stored error as an exception of its own type (by module and name, which
    is what Celery's backend stores and its readers rebuild), with its arguments."""
    module_name, _, qualname = str(decoded.get("type") or "builtins.Exception").rpartition(".")
    args = decoded.get("args")
    if not isinstance(args, list):
        args = [decoded.get("message", "")]
    # Never an import: see serialization.exception_class.
    found = serialization.exception_class(f"{module_name or 'builtins'}.{qualname}")
    if isinstance(found, type) and issubclass(found, Exception):
        try:
            return found(*args)  # type: ignore[no-any-return]
        except Exception:  # noqa: BLE001 - a constructor of its own: keep name and module
            pass
    return create_exception_cls(qualname.rpartition(".")[2] or "Exception", module_name)(*args)  # type: ignore[no-any-return]
