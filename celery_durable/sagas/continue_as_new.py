"""``continue_as_new``: a run that loops forever without its history growing.

It ends the current generation of the run and starts the next with new arguments, under
the same run id, in one transaction: the history moves to an archived run
(``<id>@<generation>``, SUCCEEDED, linked both ways, kept until ``gc``), the run becomes
PENDING with an empty history and is published again. Signals not consumed yet, and the
values of ``set_state``, stay with the run. Claim and replay then read one generation's
steps, however many came before.

Example::

    @durable.workflow
    def poll_feed(cursor: str | None = None) -> None:
        cursor = read_batch(cursor)
        cd.sleep(60)
        cd.continue_as_new(cursor)
"""

from __future__ import annotations

from typing import Any, NoReturn

from celery_durable.body.context import enter_body
from celery_durable.body.replay import write_caught_failure
from celery_durable.core import serialization
from celery_durable.errors import ContinuedAsNew


def continue_as_new(*args: Any, **kwargs: Any) -> NoReturn:
    """End this generation of the run and start it again with ``args``/``kwargs``.

    Raises a ``BaseException`` the engine handles (``except Exception`` can't swallow
    it); code after the call does not run. Arguments are JSON, like ``.delay()``'s:
    a value JSON can't hold raises ``NotSerialisable`` naming it.
    """
    ctx = enter_body("celery_durable.continue_as_new()")
    encoded = serialization.encode_arguments(
        f"continue_as_new() of workflow {ctx.workflow_name}",
        None,
        args,
        kwargs,
        ctx.max_payload_bytes,
        ctx.max_payload_depth,
    )
    write_caught_failure(ctx)
    raise ctx.stop(ContinuedAsNew(encoded))
