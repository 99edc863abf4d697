"""examples/django_shop works as its README says: ``python manage.py migrate``, ``celery -A
shop worker -l info``, ``python manage.py runserver``, then a POST to /orders/ whose order
and checkout start in one transaction; a real worker marks the order paid. On Postgres (a
database the test makes) and on SQLite (the example's default), on the session's broker.
Its tests (orders/tests.py) pass under Django's runner. The docs' Django page includes
shop/settings.py, shop/celery.py, shop/urls.py, orders/views.py, orders/workflows.py and
orders/tests.py, which these tests run."""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path

import pytest

from tests.support.django import require_django
from tests.support.django_shop import MIGRATE, README, RUNSERVER, WORKER, shop
from tests.support.services import BROKER_URL, queue_length
from tests.support.waiting import wait_until

require_django()


def test_the_readme_gives_the_three_commands_the_test_runs():
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.DOTALL)
    assert [MIGRATE, WORKER, RUNSERVER] in [block.strip().splitlines() for block in blocks]


@pytest.mark.broker
@pytest.mark.parametrize("database", ["postgres", "sqlite"])
def test_a_posted_order_is_paid_by_its_checkout_and_a_rollback_leaves_nothing(
    database: str, tmp_path: Path
):
    with shop(database, tmp_path) as made:
        assert "Applying orders.0001_initial... OK" in made.run(MIGRATE).stdout
        made.start_server()

        # Before any worker: a message the rollback failed to take back would wait here.
        status, refused = made.http("POST", "/orders/", {"item": "book", "quantity": 20})
        assert status == 409, refused
        assert refused["error"] == "at most 10 per order"
        assert made.orders() == []
        gone = made.durable("show", refused["rolled_back_run"], "--json", check=False)
        assert gone.returncode != 0 and "no workflow run" in gone.stderr, gone
        assert queue_length(BROKER_URL, made.queue) == 0

        status, placed = made.http("POST", "/orders/", {"item": "book", "quantity": 2})
        assert status == 201, placed
        made.start_worker()
        wait_until(
            lambda: made.http("GET", f"/orders/{placed['order']}/")[1]["status"] == "paid",
            60,
            0.1,
            lambda: f"the order paid; logs:\n{made.logs()}",
        )
        shown = json.loads(made.durable("show", placed["run"], "--json").stdout)
        assert shown["status"] == "SUCCEEDED" and shown["workflow"] == "orders.checkout"
        receipt = f"receipt-{placed['order']}-2500"
        assert [(s["name"], s["output"]) for s in shown["steps"]] == [
            ("orders.workflows.charge", receipt),
            ("orders.workflows.mark_paid", "paid"),
        ]
        order = {"id": placed["order"], "item": "book", "quantity": 2, "status": "paid"}
        assert made.http("GET", f"/orders/{order['id']}/") == (200, {**order, "receipt": receipt})
        assert made.orders() == [(placed["order"], "paid")]
        listed = made.durable("list", "--json").stdout.splitlines()
        assert [json.loads(line)["id"] for line in listed] == [placed["run"]]
        # The dashboard is mounted, behind Django's login.
        dashboard = http.client.HTTPConnection("127.0.0.1", made.port, timeout=10)
        dashboard.request("GET", "/durable/")
        answer = dashboard.getresponse()
        assert answer.status == 302 and answer.getheader("Location", "").startswith(
            "/admin/login/"
        ), (answer.status, answer.getheader("Location"))


def test_the_shops_own_tests_pass_with_djangos_runner_and_no_broker(tmp_path: Path):
    with shop("sqlite", tmp_path) as made:
        # Port 1 has no broker: the eager checkout and the rolled-back start publish nothing.
        made.env["CELERY_BROKER_URL"] = "redis://127.0.0.1:1/0"
        said = made.run("python manage.py test orders", "--noinput").stderr
    assert "Ran 2 tests" in said and "\nOK" in said, said
