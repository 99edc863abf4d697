"""A claim made by the limiters wing's claim variants: the kernel's ``Claim``, plus what
the claim's one statement read or took of a limiter's slots. The kernel's claim knows
nothing of slots; the wing's variants return this, and its before-body hook reads it.

Example::

    claim = LIMITERS.of(store).claim_limited_run("r1", owner, 30.0, 10, limit)
    if isinstance(claim, SlotClaim) and claim.held_slot is not None: ...
"""

from __future__ import annotations

import dataclasses

from celery_durable.store.records import Claim


@dataclasses.dataclass(frozen=True)
class SlotClaim(Claim):
    """``slot_read``: the claim of a run behind a concurrency limiter read the slot row it
    holds (``held_slot``; None: none) and whether other runs wait for that key
    (``slot_waited``). ``step_slot_taken``: the claim took the slot of the run's first
    step, and whether others wait for that key (then its release hands it on)."""

    slot_read: bool = False
    held_slot: int | None = None
    slot_waited: bool = False
    step_slot_taken: bool = False
    step_slot_waited: bool = False

    @classmethod
    def of(cls, claim: Claim, **slots: bool | int | None) -> SlotClaim:
        """``claim`` with what its statement read or took of the slots."""
        fields = {f.name: getattr(claim, f.name) for f in dataclasses.fields(Claim)}
        return cls(**fields, **slots)  # type: ignore[arg-type]
