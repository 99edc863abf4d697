"""How long the dashboard's pages take through Django (login, session, CSRF, the view
that calls the Flask app) and standalone (the Flask app alone), in-process: the median of
``--gets`` GETs of the runs page and of a run's page, over ``--runs`` stored runs, on the
test project's own Postgres database.

Run from the repository's root::

    python -m tests.support.django_timing --runs 300 --gets 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .builders import new_run
from .django import project
from .django_site import make_users

MEASURE = "from tests.support.django_timing import measure; measure({gets}, {run_id!r})"


def median_ms(get: Callable[[], Any], gets: int) -> float:
    get()  # the first builds the apps and opens the connections
    took = []
    for _ in range(gets):
        began = time.perf_counter()
        response = get()
        took.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, response.status_code
    return round(statistics.median(took), 1)


def measure(gets: int, run_id: str) -> None:
    """Inside the project's process (``manage.py shell``): print the medians as JSON."""
    from django.contrib.auth.models import User  # noqa: PLC0415 - Django is set up
    from django.test import Client  # noqa: PLC0415

    from celery_durable.contrib.django.setup import durable  # noqa: PLC0415

    django_client = Client()
    django_client.force_login(User.objects.get(username="operator"))
    flask_client = durable().dashboard_app(url_prefix="/durable").test_client()
    pages = {"runs": "/durable/", "run": f"/durable/run/{run_id}"}
    medians = {
        f"{page} {how}": median_ms(lambda c=client, p=path: c.get(p), gets)
        for page, path in pages.items()
        for how, client in (("django", django_client), ("standalone", flask_client))
    }
    print(json.dumps(medians))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--gets", type=int, default=20)
    options = parser.parse_args()
    from celery_durable.store import Store  # noqa: PLC0415

    with project("postgres", Path(tempfile.mkdtemp())) as made:
        made.manage("migrate", "--noinput")
        make_users(made)
        store = Store(made.store_url, made.prefix, made.namespace)
        try:
            for n in range(options.runs):
                store.insert_run(new_run(f"timing-{n:04d}", name="django_project.checkout"))
        finally:
            store.dispose()
        code = MEASURE.format(gets=options.gets, run_id="timing-0000")
        said = made.manage("shell", "-c", code).strip().splitlines()[-1]
        print(f"{options.runs} runs, median of {options.gets} GETs (ms): {said}")


if __name__ == "__main__":
    main()
