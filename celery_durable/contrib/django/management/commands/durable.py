"""``manage.py durable <command>``: the same commands as ``celery -A app durable <command>``
(list, show, resume, fork, cancel, signal, gc, stats, schedules, limiters, migrate ...), on
the project's Celery app."""

from __future__ import annotations

import types
from typing import Any

from django.core.management.base import BaseCommand

from celery_durable.cli import durable as durable_group


class Command(BaseCommand):
    help = "celery_durable's commands, as `celery -A app durable` gives them"

    def run_from_argv(self, argv: list[str]) -> None:
        from celery_durable.contrib.django.setup import celery_app, durables  # noqa: PLC0415

        durables()  # bound to the app, made from the settings if the project made none
        durable_group.main(
            args=argv[2:],
            prog_name=f"{argv[0]} durable",
            obj=types.SimpleNamespace(app=celery_app()),
        )

    def handle(self, *args: Any, **options: Any) -> None:  # call_command: the same group
        self.run_from_argv(["manage.py", "durable", *args])
