"""The dashboard in a Django project's URLconf and the runs in its admin: the test project
(``tests/apps/django_project``) served by ``manage.py runserver``, on Postgres, driven in
Chromium. Django's login, permissions and CSRF guard the dashboard; the admin lists runs
and cancels and resumes them, after a confirmation page, as the CLI does.

No worker runs: the runs stay PENDING until a test cancels them (a cancel publishes the
rollback, on the session's broker)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from celery_durable.store import Store
from tests.support.builders import new_run
from tests.support.django import Project, project, require_django
from tests.support.django_site import (
    Site,
    cookies_of,
    make_users,
    page_of,
    start_checkouts,
)

require_django()
pytestmark = pytest.mark.broker
REFUND = "django_project.refund"  # runs of it are rows only: no code runs here


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    with project("postgres", tmp_path_factory.mktemp("django-dash")) as configured:
        configured.manage("migrate", "--noinput")
        make_users(configured)
        yield configured


@pytest.fixture(scope="module")
def checkouts(made: Project) -> Iterator[str]:
    """Runs started as the project starts them, all at once (a subprocess each costs a
    second): each test takes the ones it needs."""
    return iter(start_checkouts(made, 16))


@pytest.fixture(scope="module")
def site(made: Project) -> Iterator[Site]:
    served = Site(made).wait_ready()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def store(made: Project) -> Iterator[Store]:
    opened = Store(made.store_url, made.prefix, made.namespace)
    yield opened
    opened.dispose()


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def test_an_anonymous_user_is_sent_to_the_login_page(site, browser):
    status, headers, _ = site.request("/durable/run/x?y=1")
    assert status == 302
    assert headers["Location"] == "/accounts/login/?next=/durable/run/x%3Fy%3D1"
    with page_of(browser, site) as page:
        page.goto("/durable/")
        assert page.url == f"{site.url}/accounts/login/?next=/durable/"
        expect(page.get_by_label("Username")).to_be_visible()


@pytest.mark.parametrize("user", ["plain", "staff"])
def test_a_user_without_the_view_permission_is_refused(site, browser, user):
    """Bug: any staff user read every run's inputs and outputs."""
    with page_of(browser, site, user) as page:
        assert page.goto("/durable/").status == 403
        assert page.goto("/durable/static/dashboard.css").status == 403


def test_an_operator_cancels_a_run_from_its_page_and_a_post_without_the_token_is_refused(
    site, browser, store, checkouts
):
    run_id, other_id = next(checkouts), next(checkouts)
    with page_of(browser, site, "operator") as page:
        page.goto(f"/durable/run/{run_id}")
        expect(page.locator(".run-head")).to_contain_text(run_id)
        # The form carries Django's token, not the standalone dashboard's.
        assert page.locator("form.action input[name=csrfmiddlewaretoken]").count() >= 2
        assert page.locator("input[name=csrf_token]").count() == 0
        page.get_by_label("Reason").fill("customer left")
        page.get_by_role("button", name="Cancel run").click()
        expect(page.locator(".notice-ok")).to_contain_text("Cancel requested: the run is CANCELLED")
        expect(page.locator(".run-head .badge")).to_have_text("⊘ cancelled")
        assert page.url == f"{site.url}/durable/run/{run_id}"
        cookies = cookies_of(page)
    cancelled = store.get_run(run_id)
    assert cancelled is not None and cancelled.status == "CANCELLED"
    assert cancelled.cancel_requested and cancelled.cancel_reason == "customer left"
    assert [(a.action, a.actor, a.detail) for a in store.run_actions(run_id)] == [
        ("cancel", "operator", "customer left")
    ]

    form = {"id": other_id, "reason": "forged"}
    # The operator's session, and no token / the standalone dashboard's double-submit pair /
    # a token that is not the session's: Django's CSRF check refuses each.
    attempts = [
        (cookies, form),
        ({**cookies, "durable_csrf": "t" * 43}, {**form, "csrf_token": "t" * 43}),
        (cookies, {**form, "csrfmiddlewaretoken": "x" * 64}),
    ]
    for sent_cookies, sent_form in attempts:
        status, _, body = site.request(
            "/durable/action/cancel", form=sent_form, cookies=sent_cookies
        )
        assert status == 403 and "CSRF verification failed" in body
    untouched = store.get_run(other_id)
    assert untouched is not None and untouched.status == "PENDING"


def selected(page: Any, run_ids: list[str], action: str) -> None:
    """Tick ``run_ids`` in the admin's list and run ``action`` on them."""
    for run_id in run_ids:
        page.locator(f"input[name=_selected_action][value='{run_id}']").check()
    page.locator("select[name=action]").select_option(label=action)
    page.locator("button[name=index]").first.click()


def test_the_admin_lists_the_namespaces_runs_with_filters_and_dashboard_links(
    made, site, browser, store, checkouts
):
    started = [next(checkouts), next(checkouts)]
    refund = f"{made.namespace}-refund"
    assert store.insert_run(new_run(refund, name=REFUND))
    elsewhere = Store(made.store_url, made.prefix, f"{made.namespace}-other")
    try:
        assert elsewhere.insert_run(new_run("of-another-namespace", name=REFUND))
    finally:
        elsewhere.dispose()
    with page_of(browser, site, "viewer") as page:
        page.goto("/admin/celery_durable/run/")
        rows = page.locator("#result_list tbody tr")
        listed = set(rows.locator("th a").all_inner_texts())
        assert {*started, refund} <= listed and "of-another-namespace" not in listed

        filters = page.locator("#changelist-filter")
        filters.get_by_role("link", name=REFUND).click()
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text(refund)
        filters.get_by_role("link", name="All").first.click()
        filters.get_by_role("link", name="django_project.checkout").click()
        page.wait_for_url(lambda url: "name=django_project.checkout" in url)
        filters.get_by_role("link", name="pending").click()
        page.wait_for_url(lambda url: "status__exact=PENDING" in url and "name=" in url)
        shown = set(rows.locator("th a").all_inner_texts())
        assert set(started) <= shown and refund not in shown
        assert set(rows.locator("td.field-status").all_inner_texts()) == {"pending"}

        link = page.locator(f"tr:has(th a:text-is('{refund}')) a.dashboard-link")
        page.goto(f"/admin/celery_durable/run/?q={refund}")
        assert link.get_attribute("href") == f"/durable/run/{refund}"
        link.click()
        expect(page.locator(".run-head")).to_contain_text(refund)
        assert page.url == f"{site.url}/durable/run/{refund}"

        # Read-only: no add, no save, no delete.
        assert page.goto("/admin/celery_durable/run/add/").status == 403
        page.goto(f"/admin/celery_durable/run/{refund}/change/")
        expect(page.locator(".field-page a.dashboard-link")).to_be_visible()
        assert page.locator("input[type=submit]").count() == 0
        page.goto("/admin/celery_durable/run/")
        # A viewer is offered no action at all (not even Django's delete).
        assert page.locator("select[name=action]").count() == 0


def test_the_admin_cancels_after_confirming_as_the_cli_does_then_resumes(
    made, site, browser, store, checkouts
):
    by_admin, by_cli = next(checkouts), next(checkouts)
    with page_of(browser, site, "operator") as page:
        page.goto(f"/admin/celery_durable/run/?q={by_admin}")
        selected(page, [by_admin], "Cancel selected runs")
        expect(page.locator("#content")).to_contain_text("Cancel these runs?")
        expect(page.locator("#content ul.durable-runs")).to_contain_text(by_admin)
        waiting = store.get_run(by_admin)
        assert waiting is not None and waiting.status == "PENDING"  # asked, not done
        page.get_by_label("Reason").fill("out of stock")
        page.get_by_role("button", name="Yes, I’m sure").click()
        expect(page.locator(".messagelist")).to_contain_text(
            f"{by_admin}: cancel requested: the run is CANCELLED"
        )
        made.manage("durable", "cancel", by_cli, "--reason", "out of stock")
        admin_run, cli_run = store.get_run(by_admin), store.get_run(by_cli)
        assert admin_run is not None and cli_run is not None
        fields = ("status", "cancel_requested", "cancel_reason", "error", "attempts")
        assert {f: getattr(admin_run, f) for f in fields} == {
            f: getattr(cli_run, f) for f in fields
        }
        assert admin_run.status == "CANCELLED" and admin_run.cancel_requested

        page.goto(f"/admin/celery_durable/run/?q={by_admin}")
        selected(page, [by_admin], "Resume selected runs")
        expect(page.locator("#content")).to_contain_text("Resume these runs")
        page.get_by_role("button", name="Yes, I’m sure").click()
        expect(page.locator(".messagelist")).to_contain_text(
            f"{by_admin}: resumed: the run is PENDING"
        )
        resumed = store.get_run(by_admin)
        assert resumed is not None and resumed.status == "PENDING"
        assert [(a.action, a.actor, a.detail) for a in store.run_actions(by_admin)] == [
            ("cancel", "operator", "out of stock"),
            ("resume", "operator", None),
        ]
        assert store.run_actions(by_cli) == []  # the CLI's operator is no user of the site

        # A run that can't be: said so, and nothing else happens.
        page.goto(f"/admin/celery_durable/run/?q={by_admin}")
        selected(page, [by_admin], "Resume selected runs")
        page.get_by_role("button", name="Yes, I’m sure").click()
        expect(page.locator(".messagelist .error")).to_contain_text(f"{by_admin}: not done")


# Django's test client in the project's process: settings that need no server of their own.
PERMISSION_CHECKS = """
import json
from django.contrib.auth.models import Permission, User
from django.test import Client

def client_of(username):
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client

def said_to(username, run_id, admin_run_id):
    client = client_of(username)
    run_page = client.get(f"/durable/run/{run_id}")
    changelist = client.get("/admin/celery_durable/run/")
    return {
        "dashboard": client.get("/durable/").status_code,
        "cancel_shown": "Cancel run" in run_page.content.decode(),
        "admin_list": changelist.status_code,
        "admin_cancel_offered": "Cancel selected runs" in changelist.content.decode(),
        "post": client.post("/durable/action/cancel", {"id": run_id}).status_code,
        "admin_post": client.post(
            "/admin/celery_durable/run/",
            {"action": "cancel_runs", "_selected_action": admin_run_id, "post": "yes"},
        ).status_code,
    }

for name in NAMED:
    User.objects.get(username="operator").user_permissions.add(
        Permission.objects.get(codename=name.split(".")[1])
    )
print(json.dumps({user: said_to(user, *runs) for user, runs in RUNS.items()}))
"""


def said(made: Project, runs: dict[str, tuple[str, str]], **env: str) -> Any:
    named = [env["TEST_DJANGO_DASHBOARD_PERMISSION"]] if env.get("GRANT_NAMED") else []
    code = PERMISSION_CHECKS.replace("RUNS", repr(runs)).replace("NAMED", repr(named))
    return json.loads(made.manage("shell", "-c", code, env=env).strip().splitlines()[-1])


def test_view_permission_reads_change_permission_acts(made, checkouts, store):
    """Bug: any staff user could read, cancel, resume, fork and signal every run."""
    runs = {user: (next(checkouts), next(checkouts)) for user in ("staff", "viewer", "operator")}
    answers = said(made, runs)
    refused = {"dashboard": 403, "cancel_shown": False, "admin_list": 403}
    assert answers["staff"] == {
        **refused,
        "admin_cancel_offered": False,
        "post": 403,
        "admin_post": 403,
    }
    assert answers["viewer"] == {
        "dashboard": 200,
        "cancel_shown": False,
        "admin_list": 200,
        "admin_cancel_offered": False,
        "post": 403,
        "admin_post": 200,  # the changelist again: Django offers no such action to them
    }
    assert answers["operator"] == {
        "dashboard": 200,
        "cancel_shown": True,
        "admin_list": 200,
        "admin_cancel_offered": True,
        "post": 303,
        "admin_post": 302,
    }
    statuses = {user: [store.get_status(r) for r in ids] for user, ids in runs.items()}
    assert statuses == {
        "staff": ["PENDING", "PENDING"],
        "viewer": ["PENDING", "PENDING"],
        "operator": ["CANCELLED", "CANCELLED"],
    }
    for run_id in runs["operator"]:
        assert [(a.action, a.actor) for a in store.run_actions(run_id)] == [("cancel", "operator")]


def test_a_named_permission_is_needed_too_and_read_only_shows_no_action(made, checkouts, store):
    named = {"TEST_DJANGO_DASHBOARD_PERMISSION": "shop.view_order"}
    runs = {"operator": (next(checkouts), next(checkouts))}
    answers = said(made, runs, **named)
    assert answers["operator"]["dashboard"] == 403 and answers["operator"]["post"] == 403
    assert [store.get_status(r) for r in runs["operator"]] == ["PENDING", "PENDING"]

    read_only = {**named, "TEST_DJANGO_DASHBOARD_READ_ONLY": "1", "GRANT_NAMED": "1"}
    answers = said(made, runs, **read_only)
    assert answers["operator"] == {
        "dashboard": 200,
        "cancel_shown": False,
        "admin_list": 200,
        "admin_cancel_offered": False,
        "post": 403,
        "admin_post": 200,
    }
    assert [store.get_status(r) for r in runs["operator"]] == ["PENDING", "PENDING"]
