"""The Django test project served over HTTP (``manage.py runserver`` in a subprocess, on
a free port), its users, and a Chromium to drive it.

Example::

    with project("postgres", tmp) as made:
        made.manage("migrate", "--noinput")
        site = Site(made).wait_ready()
        status, body = site.get("/durable/")       # 302 to the login page
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .django import MANAGE, Project
from .flower import free_port
from .waiting import wait_until
from .workers import ROOT

# Staff users with no permission on runs, with view_run, and with view_run and change_run;
# and a user who isn't staff.
USERS = {
    "staff": "staff-pw-1",
    "viewer": "viewer-pw-1",
    "operator": "operator-pw-1",
    "plain": "plain-pw-1",
}
MAKE_USERS = """
from django.contrib.auth.models import Permission, User
view, change = (Permission.objects.get(codename=c) for c in ("view_run", "change_run"))
User.objects.create_user("staff", password="staff-pw-1", is_staff=True)
viewer = User.objects.create_user("viewer", password="viewer-pw-1", is_staff=True)
viewer.user_permissions.add(view)
operator = User.objects.create_user("operator", password="operator-pw-1", is_staff=True)
operator.user_permissions.add(view, change)
User.objects.create_user("plain", password="plain-pw-1")
"""


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Site:
    """``manage.py runserver --noreload --insecure`` of ``made`` on 127.0.0.1 and a free
    port."""

    def __init__(self, made: Project, env: Mapping[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(tempfile.mkstemp(prefix="django-site-", suffix=".log")[1])
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                *(sys.executable, str(MANAGE), "runserver", "--noreload"),
                # The admin's own static files, which DEBUG=False leaves unserved.
                *("--insecure", f"127.0.0.1:{self.port}"),
            ],
            cwd=ROOT,
            env={**os.environ, **made.env, **(env or {}), "PYTHONUNBUFFERED": "1"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> Site:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"runserver exited early:\n{self.log()}")
            try:
                return self.get("/accounts/login/")[0] == 200
            except OSError:
                return False

        wait_until(up, timeout, 0.1, lambda: f"the site to answer; log:\n{self.log()}")
        return self

    def request(
        self,
        path: str,
        *,
        form: Mapping[str, str] | None = None,
        cookies: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:
        """``(status, headers, body)`` of a GET (or, with ``form``, a POST), redirects
        not followed."""
        data = None if form is None else urllib.parse.urlencode(form).encode()
        headers = {}
        if cookies:
            headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in cookies.items())
        call = urllib.request.Request(self.url + path, data=data, headers=headers)
        opener = urllib.request.build_opener(NoRedirects)
        try:
            with opener.open(call, timeout=10) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read().decode()

    def get(self, path: str) -> tuple[int, str]:
        status, _, body = self.request(path)
        return status, body

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


def make_users(made: Project) -> None:
    made.manage("shell", "-c", MAKE_USERS)


def start_checkouts(made: Project, count: int) -> list[str]:
    """``count`` checkouts started as the project starts them (``.delay()``): their ids."""
    code = (
        "import json\n"
        "from tests.apps.django_project.celery import checkout\n"
        f"print(json.dumps([checkout.delay(n).id for n in range({count})]))\n"
    )
    ids: list[str] = made.manage_json("shell", "-c", code)
    return ids


@contextmanager
def page_of(browser: Any, site: Site, user: str | None = None) -> Iterator[Any]:
    """A page in a context of its own on ``site``, logged in as ``user`` (None: anonymous)
    through the login form; every confirm dialog is accepted."""
    context = browser.new_context(base_url=site.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    opened = context.new_page()
    opened.on("dialog", lambda dialog: dialog.accept())
    try:
        if user is not None:
            opened.goto("/accounts/login/")
            opened.get_by_label("Username").fill(user)
            opened.get_by_label("Password").fill(USERS[user])
            opened.get_by_role("button", name="Log in").click()
            opened.wait_for_url(lambda url: "/accounts/login/" not in url)
        yield opened
    finally:
        context.close()


def cookies_of(page: Any) -> dict[str, str]:
    return {cookie["name"]: cookie["value"] for cookie in page.context.cookies()}
