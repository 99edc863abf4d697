"""The dashboard in a real browser: Playwright driving Debian's Chromium.

A live ``celery -A tests.apps.basic durable dashboard`` process (basic auth on), a real
worker, Redis and Postgres. One browser for the session; each test has its own context.
The tests run in the Redis pass only: the dashboard talks to the database, and to the
broker only through the operations the broker suites already cover.

``UPDATE_SCREENSHOTS=1`` writes the two screenshots the docs site shows into docs/images/.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.dashboard import Dashboard
from tests.support.services import BROKER, BROKER_URL, unique
from tests.support.waiting import wait_until
from tests.support.workers import ROOT

pytestmark = pytest.mark.skipif(
    BROKER != "redis", reason="browser tests run in the Redis pass (no broker-specific path)"
)
# The README example's runs go here: no worker of the test app takes them.
QUEUE_OF_ORDERS = unique("orders-")
SECONDS = 1000  # Playwright's timeouts are in milliseconds


@pytest.fixture(scope="module")
def board(basic_app: object) -> Iterator[Dashboard]:
    process = Dashboard("tests.apps.basic").wait_ready()
    yield process
    process.stop()


@contextmanager
def page_of(browser: Any, board: Dashboard) -> Iterator[Any]:
    """A page in a context of its own, logged in to ``board``, 1280 px wide."""
    context = browser.new_context(
        base_url=board.url,
        http_credentials={"username": board.user, "password": board.password},
        viewport={"width": 1280, "height": 900},
    )
    context.set_default_timeout(15 * SECONDS)
    opened = context.new_page()
    opened.on("dialog", lambda dialog: dialog.accept())  # every action asks to confirm
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture
def page(browser: Any, board: Dashboard) -> Iterator[Any]:
    with page_of(browser, board) as opened:
        yield opened


@pytest.fixture
def waiting_run(basic_app: Any, shared_worker: Any, key: str) -> Iterator[Any]:
    """A run of ``signalled_steps`` waiting for signal "go"; cancelled at teardown if it
    still waits (a waiting run left over would be the session's oldest for other tests)."""
    handle = basic_app.signalled_steps.apply_async((key,), run_id=f"{key}-waiting")
    wait_until(lambda: handle.status().value == "WAITING", 30, message="the run to wait")
    yield handle
    if not handle.status().finished:
        handle.cancel("test over")


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def run_status(page: Any) -> Any:
    return page.locator(".run-head .badge")


def result_of(page: Any) -> Any:
    return page.locator("h2", has_text="Result").locator("xpath=following-sibling::*[1]")


def test_filter_the_runs_open_one_and_see_its_steps(
    basic_app, shared_worker, page, key, rds, waiting_run
):
    rds.set(f"bug:{key}", "1")
    failed = basic_app.fixable.apply_async((key,), run_id=f"{key}-failed")
    done = basic_app.five_steps.apply_async((key,), run_id=f"{key}-done")
    done.get(timeout=30)
    wait_until(lambda: failed.status().finished, 30, message="the run to fail")
    page.goto("/")
    page.get_by_label("Id or prefix").fill(key)
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator(f"tr[data-run='{key}-failed']")).to_contain_text("RuntimeError: bug")
    page.get_by_label("Workflow").select_option("tests.apps.basic.five_steps")
    page.get_by_role("checkbox", name="succeeded").check()
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("✓ succeeded")
    rows.first.get_by_role("link", name=done.id).click()
    expect(run_status(page)).to_have_text("✓ succeeded")
    steps = page.locator("li.step")
    expect(steps).to_have_count(5)
    expect(steps.nth(2)).to_contain_text("tests.apps.basic.numbered")
    expect(steps.nth(2).locator("pre").last).to_have_text("30")
    expect(result_of(page)).to_have_text("[10, 20, 30, 40, 50]")
    page.goto(f"/run/{failed.id}")
    expect(page.locator("#step-1")).to_contain_text(f"RuntimeError: bug in step 2 of {key}")
    page.goto("/workflows")
    row = page.locator("tr", has_text="tests.apps.basic.five_steps")
    row.get_by_role("link", name="tests.apps.basic.five_steps").click()
    expect(page.get_by_label("Workflow")).to_have_value("tests.apps.basic.five_steps")


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    """Into tmp_path, and into docs/images/ with UPDATE_SCREENSHOTS=1 (for the docs site)."""
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 10_000
    if os.environ.get("UPDATE_SCREENSHOTS"):
        (ROOT / "docs" / "images").mkdir(exist_ok=True)
        shutil.copy(path, ROOT / "docs" / "images" / name)


def test_cancel_a_waiting_run(page, waiting_run):
    handle = waiting_run
    page.goto(f"/run/{handle.id}")
    expect(run_status(page)).to_have_text("‖ waiting")
    expect(page.locator(".facts")).to_contain_text("signal go")
    page.get_by_label("Reason").fill("customer left")
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator(".notice-ok")).to_contain_text("Cancel requested: the run is CANCELLED")
    expect(run_status(page)).to_have_text("⊘ cancelled")
    expect(page.locator(".facts")).to_contain_text("customer left")
    assert handle.status().value == "CANCELLED"


def test_resume_a_failed_run_after_the_fix(basic_app, shared_worker, page, key, rds):
    rds.set(f"bug:{key}", "1")
    handle = basic_app.fixable.delay(key)
    wait_until(lambda: handle.status().finished, 60, message="the run to fail")
    page.goto(f"/run/{handle.id}")
    expect(run_status(page)).to_have_text("✕ failed")
    expect(page.locator("#step-1")).to_contain_text(f"RuntimeError: bug in step 2 of {key}")
    rds.delete(f"bug:{key}")  # the fix is deployed
    page.get_by_role("button", name="Resume").click()
    expect(page.locator(".notice-ok")).to_contain_text("Resumed")
    # The page refreshes itself while the run goes on.
    expect(run_status(page)).to_have_text("✓ succeeded", timeout=30 * SECONDS)
    assert handle.get(timeout=5) == [10, 20, 30]


def test_fork_from_step_2(basic_app, shared_worker, page, key):
    origin = basic_app.five_steps.apply_async((key,), run_id=f"{key}-origin")
    origin.get(timeout=30)
    page.goto(f"/run/{origin.id}")
    page.get_by_label("Fork from step").fill("2")
    page.get_by_label("New id").fill(f"{key}-forked")
    page.get_by_role("button", name="Fork").click()
    page.wait_for_url(f"**/run/{key}-forked")
    expect(page.locator(".notice-ok")).to_contain_text(f"Forked from {origin.id} at step 2")
    expect(page.locator(".facts")).to_contain_text(f"{origin.id} at step 2")
    expect(run_status(page)).to_have_text("✓ succeeded", timeout=30 * SECONDS)
    store = basic_app.durable.runtime.store
    kept, before = store.load_steps(f"{key}-forked"), store.load_steps(origin.id)
    assert [kept[0], kept[1]] == [before[0], before[1]]


def test_send_a_signal_and_watch_the_run_finish_with_a_script_shown_as_text(page, waiting_run):
    handle = waiting_run
    page.goto(f"/run/{handle.id}")
    payload = page.get_by_label("Payload (JSON)")
    payload.fill("{not json")
    page.get_by_role("button", name="Send signal").click()
    expect(payload).to_have_class("invalid")  # checked before sending: nothing sent
    assert handle.status().value == "WAITING"
    script = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>"
    payload.fill(f'{{"note": "{script}"}}'.replace("'", "\\u0027"))
    page.get_by_role("button", name="Send signal").click()
    expect(page.locator(".notice-ok")).to_contain_text("Signal 'go' stored")
    expect(run_status(page)).to_have_text("✓ succeeded", timeout=30 * SECONDS)
    expect(result_of(page)).to_contain_text("<script>window.__pwned = 1</script>")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main script, main img").count() == 0


def test_the_pages_fit_a_phone(browser, board, waiting_run):
    """390 px wide: no page scrolls sideways; the runs table turns into cards."""
    with page_of(browser, board) as phone:
        phone.set_viewport_size({"width": 390, "height": 844})
        wider = "document.documentElement.scrollWidth - window.innerWidth"
        for path in ("/", f"/run/{waiting_run.id}", "/workflows"):
            phone.goto(path)
            expect(phone.locator("main")).to_be_visible()
            assert phone.evaluate(wider) <= 0, path
        phone.goto("/")
        assert phone.locator("table.runs thead").is_hidden()


def test_basic_auth_refuses_a_wrong_password(browser, board):
    from playwright.sync_api import Error

    wrong = browser.new_context(http_credentials={"username": board.user, "password": "wrong"})
    try:
        # Chromium shows the 401, or gives up retrying the wrong credentials.
        try:
            response = wrong.new_page().goto(board.url + "/")
            assert response is not None and response.status == 401
        except Error as exc:
            assert "ERR_INVALID_AUTH_CREDENTIALS" in str(exc)
    finally:
        wrong.close()
    anonymous = browser.new_context()
    try:
        response = anonymous.request.get(board.url + "/run/x")
        assert response.status == 401
        assert response.headers["www-authenticate"].startswith("Basic ")
    finally:
        anonymous.close()
    assert board.get("/", password="wrong")[0] == 401
    assert board.get("/")[0] == 200


def test_a_post_without_the_csrf_token_is_refused(page, waiting_run):
    handle = waiting_run
    page.goto(f"/run/{handle.id}")
    post = """async ([id, token]) => {
        const body = new URLSearchParams({id: id, reason: "forged"});
        if (token) body.set("csrf_token", token);
        const response = await fetch("/action/cancel", {method: "POST", body: body});
        return [response.status, await response.text()];
    }"""
    for token in (None, "not-the-cookie"):
        status, text = page.evaluate(post, [handle.id, token])
        assert (status, text.strip()) == (403, "Refused: missing or wrong CSRF token")
    assert handle.status().value == "WAITING"


@pytest.fixture
def orders(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, dict[str, str]]]:
    """The README's example (examples/orders.py) in a namespace of its own, and the
    environment of its worker and dashboard processes: the dashboard shows only its runs."""
    env = {"CELERY_BROKER_URL": BROKER_URL, "CELERY_DURABLE_NAMESPACE": unique("orders-")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("ORDERS_BUG", raising=False)
    sys.modules.pop("examples.orders", None)
    module = importlib.import_module("examples.orders")
    yield module, env
    module.durable.runtime.store.dispose()
    sys.modules.pop("examples.orders", None)


def test_the_readme_example_live_in_the_dashboard(
    basic_app, browser, start_worker, orders, key, tmp_path
):
    """The issue's "done when": ``celery -A examples.orders durable dashboard`` (the
    README's command) and the example's worker, as processes. Runs appear without a reload;
    an order the bad deploy failed is resumed from the browser after the fix; a refund
    waiting for approval gets it from the browser. Takes the README's two screenshots."""
    app, env = orders
    buggy = start_worker(app="examples.orders", queues=QUEUE_OF_ORDERS, env={"ORDERS_BUG": "1"})
    board = Dashboard("examples.orders", env=env).wait_ready()
    try:
        with page_of(browser, board) as page:
            page.goto("/")
            rows = page.locator("table.runs tbody tr[data-run]")
            expect(rows).to_have_count(0)
            page.evaluate("window.__loaded = 'once'")  # a reload would lose it

            def start(flow: Any, n: int, name: str) -> Any:
                run_id = f"{key}-{name}-{n}"
                return flow.apply_async((n,), run_id=run_id, queue=QUEUE_OF_ORDERS)

            checkouts = [start(app.checkout, n, "order") for n in (1, 2, 3)]
            refund = start(app.refund, 1, "refund")
            expect(rows).to_have_count(4)
            row = {h.id: page.locator(f"tr[data-run='{h.id}']") for h in (*checkouts, refund)}
            for handle in checkouts[:2]:
                expect(row[handle.id]).to_contain_text("✓ succeeded", timeout=30 * SECONDS)
            failed = checkouts[2]  # 2,500: over the bad deploy's limit, on both attempts
            expect(row[failed.id]).to_contain_text("✕ failed", timeout=30 * SECONDS)
            expect(row[failed.id]).to_contain_text("ValueError: amount 2500 is over the card")
            expect(row[failed.id]).to_contain_text("1: charge")  # the step it ended on
            expect(row[refund.id]).to_contain_text("‖ waiting")
            expect(row[refund.id]).to_contain_text("0: signal:approval")
            assert page.evaluate("window.__loaded") == "once"  # all of it without a reload
            screenshot(page, "dashboard-runs.png", tmp_path)

            row[failed.id].get_by_role("link", name=failed.id).click()
            expect(run_status(page)).to_have_text("✕ failed")
            # Each step says which attempt ran it and when it began (the run's time).
            started = re.compile(r"started \d\d:\d\d:\d\d\.\d{3} \(\+[\dhms.]+\)")
            reserve, charge = page.locator("#step-0 .when"), page.locator("#step-1 .when")
            expect(reserve).to_contain_text("attempt 1")
            expect(charge).to_contain_text("attempt 2")  # the retry ran it again
            expect(reserve).to_have_text(started)
            expect(charge).to_have_text(started)
            expect(page.locator("#step-1")).to_contain_text("ValueError")
            screenshot(page, "dashboard-run.png", tmp_path)

            buggy.stop()  # deploy the fix, then resume from the browser
            start_worker(app="examples.orders", queues=QUEUE_OF_ORDERS)
            page.get_by_role("button", name="Resume").click()
            expect(page.locator(".notice-ok")).to_contain_text("Resumed")
            expect(run_status(page)).to_have_text("✓ succeeded", timeout=30 * SECONDS)
            expect(result_of(page)).to_contain_text("receipt-3-2500")

            page.goto(f"/run/{refund.id}")
            expect(run_status(page)).to_have_text("‖ waiting")
            page.get_by_label("Payload (JSON)").fill('"alice"')
            page.get_by_role("button", name="Send signal").click()
            expect(page.locator(".notice-ok")).to_contain_text("Signal 'approval' stored")
            expect(run_status(page)).to_have_text("✓ succeeded", timeout=30 * SECONDS)
            expect(result_of(page)).to_contain_text("refunded 1 (alice)")
    finally:
        board.stop()
    assert failed.get(timeout=5) == {"receipt": "receipt-3-2500", "parcel": "parcel-3"}
    assert refund.get(timeout=5) == "refunded 1 (alice)"


@pytest.fixture
def embedded_board(durable: Any) -> Iterator[Any]:
    """The embedded default's dashboard (SQLite, eager mode) served from a thread, with
    the same basic auth as ``board``: for pages that need no worker."""
    import threading

    from werkzeug.serving import make_server

    user, password = Dashboard.user, Dashboard.password
    server = make_server("127.0.0.1", 0, durable.dashboard_app(basic_auth=f"{user}:{password}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    yield type("EmbeddedBoard", (), {"url": url, "user": user, "password": password})()
    server.shutdown()
    thread.join(timeout=10)


def test_pause_a_schedule_from_its_page(browser, durable, embedded_board):
    from tests.support.schedules import next_slot

    @durable.workflow
    def report(scheduled_for: Any) -> None:
        return None

    durable.schedule(report, every=60, name="report-eu")
    next_slot(durable, "report-eu")  # upserted, as a worker does when it starts
    with page_of(browser, embedded_board) as page:
        page.goto("/")
        page.get_by_role("link", name="Schedules").click()
        row = page.locator("tr[data-schedule='report-eu']")
        expect(row).to_contain_text("every 1m")
        expect(row.locator("[data-status]")).to_have_text("active")
        row.get_by_role("button", name="Pause report-eu").click()  # confirmed by page_of
        expect(page.locator(".notice-ok")).to_contain_text("Paused 'report-eu'")
        expect(row.locator("[data-status]")).to_have_text("paused")
        expect(row.get_by_role("button", name="Resume report-eu")).to_be_visible()
    [stored] = [
        r for r in durable.runtime.store.schedules.list_schedules() if r.name == "report-eu"
    ]
    assert stored.paused
