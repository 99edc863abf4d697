"""QueueWatch: which queues the sweeper takes as unconsumed, from the inspect answers it got.

The answers are scripted (a subclass's ``_ask``): what is tested is the watch's policy for
known, unknown and stale answers, not Celery's broadcast (the integration tests of
``test_composition_queues.py`` run that against real workers)."""

from __future__ import annotations

from collections.abc import Iterator

from celery import Celery

from celery_durable.engine.queues import QueueWatch


class ScriptedWatch(QueueWatch):
    def __init__(self, answers: list[set[str] | None], keep_known: float) -> None:
        super().__init__(Celery("scripted"), ttl=0.0, keep_known=keep_known)
        self._answers: Iterator[set[str] | None] = iter(answers)

    def _ask(self) -> set[str] | None:
        return next(self._answers)


def test_an_unknown_answer_keeps_a_queue_known_unconsumed_so_no_copy_is_published() -> None:
    # The second broadcast's replies came late (a worker under load): the queue is still
    # the one no worker consumed a moment ago, and its messages still wait there.
    watch = ScriptedWatch([{"celery"}, None, None], keep_known=60.0)
    assert watch.unconsumed({"gpu", "celery"}) == {"gpu"}
    assert watch.unconsumed({"gpu", "celery"}) == {"gpu"}
    assert watch.unconsumed({"gpu"}) == {"gpu"}


def test_an_unknown_answer_past_keep_known_is_unknown_again() -> None:
    watch = ScriptedWatch([{"celery"}, None], keep_known=0.0)
    assert watch.unconsumed({"gpu"}) == {"gpu"}
    assert watch.unconsumed({"gpu"}) == set()


def test_a_new_known_answer_replaces_the_last() -> None:
    watch = ScriptedWatch([{"celery"}, {"celery", "gpu"}], keep_known=60.0)
    assert watch.unconsumed({"gpu"}) == {"gpu"}
    assert watch.unconsumed({"gpu"}) == set()


def test_never_known_is_unknown() -> None:
    watch = ScriptedWatch([None], keep_known=60.0)
    assert watch.unconsumed({"gpu"}) == set()
