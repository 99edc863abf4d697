"""What a wing adds to the operator tools: pages, page sections and actions of the
dashboard, what ``durable show`` and the dashboard's run page show of one run, and
gauges of the metrics endpoint. A wing declares its parts in its own
modules; ``wiring.py`` registers them here, and the dashboard and the metrics endpoint
read them, so neither imports a wing.

Example::

    WING_PARTS.add_page(DashboardPage("schedules", "/schedules", "Schedules", ...))
    WING_PARTS.add_gauge(MetricsGauge("schedule_lag_seconds", "How late ...", ...))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from celery_durable.engine.runtime import Runtime
    from celery_durable.ops.operations import Operations
    from celery_durable.store import RunRecord

Part = TypeVar("Part")


@dataclasses.dataclass(frozen=True)
class DashboardPage:
    """A page of its own, linked from the nav: ``rule`` under the dashboard's prefix,
    served as ``durable.<endpoint>`` by ``template``, given ``rows=read(operations)``."""

    endpoint: str
    rule: str
    title: str
    template: str
    read: Callable[[Operations], Any]


@dataclasses.dataclass(frozen=True)
class DashboardActions:
    """The buttons of a page: a POST to ``rule`` (which has a ``<verb>`` part) with the
    form's ``name`` runs ``act(operations, verb, name)``, whose line is the notice, and
    goes back to the page ``back``. Refused in read-only mode; a verb not in ``verbs``
    is a 404."""

    endpoint: str
    rule: str
    verbs: tuple[str, ...]
    act: Callable[[Operations, str, str], str]
    back: str


@dataclasses.dataclass(frozen=True)
class DashboardSection:
    """What a wing shows on a page of the kernel's: its template gets
    ``<name>=read(operations)`` (the workflows page's ``limiters``)."""

    page: str
    name: str
    read: Callable[[Operations], Any]


@dataclasses.dataclass(frozen=True)
class DashboardEvents:
    """A Server-Sent Events endpoint: GET ``rule`` answers ``text/event-stream`` with
    what ``open(operations, last_event_id, query)`` yields, each an event as the wire
    carries it; what it raises before its first event (InvalidArgument: 400, a
    LookupError such as WorkflowNotFound: 404) answers instead."""

    endpoint: str
    rule: str
    open: Callable[[Operations, str | None, Mapping[str, str]], Iterator[str]]


@dataclasses.dataclass(frozen=True)
class RunPart:
    """What a wing shows of one run: ``read(operations, run)`` is its JSON, which
    ``durable show --json`` holds under ``name``; ``lines`` of it are what ``durable
    show`` prints; the dashboard's run page includes ``template`` with ``part`` (it).
    A ``live`` part is drawn again with each refresh of the page's head; one that keeps
    its own connection (a stream's events) is drawn once, and the page reloads when the
    number of things it shows changes."""

    name: str
    read: Callable[[Operations, RunRecord], Any]
    lines: Callable[[Any], list[str]]
    template: str
    live: bool = False


@dataclasses.dataclass(frozen=True)
class MetricsGauge:
    """A gauge of the metrics endpoint, ``celery_durable_<name>``, labelled by namespace
    and ``labels``; ``read(runtime)`` gives (label values, value) pairs, read with the
    other figures (a failure makes the namespace's ``metrics_up`` 0)."""

    name: str
    text: str
    labels: tuple[str, ...]
    read: Callable[[Runtime], Iterable[tuple[tuple[str, ...], float]]]


@dataclasses.dataclass
class WingParts:
    """The parts registered, each kind in the order it was added (the nav's order)."""

    pages: list[DashboardPage] = dataclasses.field(default_factory=list)
    actions: list[DashboardActions] = dataclasses.field(default_factory=list)
    sections: list[DashboardSection] = dataclasses.field(default_factory=list)
    gauges: list[MetricsGauge] = dataclasses.field(default_factory=list)
    run_parts: list[RunPart] = dataclasses.field(default_factory=list)
    events: list[DashboardEvents] = dataclasses.field(default_factory=list)

    def add_page(self, page: DashboardPage) -> None:
        _add(self.pages, page, lambda p: p.endpoint)

    def add_actions(self, actions: DashboardActions) -> None:
        _add(self.actions, actions, lambda a: a.endpoint)

    def add_section(self, section: DashboardSection) -> None:
        _add(self.sections, section, lambda s: (s.page, s.name))

    def add_gauge(self, gauge: MetricsGauge) -> None:
        _add(self.gauges, gauge, lambda g: g.name)

    def add_events(self, events: DashboardEvents) -> None:
        _add(self.events, events, lambda e: e.endpoint)

    def add_run_part(self, part: RunPart) -> None:
        _add(self.run_parts, part, lambda p: p.name)

    def parts_of_run(self, operations: Operations, run: RunRecord) -> dict[str, Any]:
        """What the wings show of ``run``, by part name (its JSON)."""
        return {part.name: part.read(operations, run) for part in self.run_parts}

    def sections_of(self, page: str, operations: Operations) -> dict[str, Any]:
        """What the wings show on the kernel's page ``page``, by template name."""
        return {s.name: s.read(operations) for s in self.sections if s.page == page}


def _add(parts: list[Part], part: Part, key: Callable[[Part], Any]) -> None:
    # wiring.py registers at import: a second import (a reload) replaces, in place.
    for i, known in enumerate(parts):
        if key(known) == key(part):
            parts[i] = part
            return
    parts.append(part)


# The one registry: every Durable of a process has the same wings.
WING_PARTS = WingParts()
