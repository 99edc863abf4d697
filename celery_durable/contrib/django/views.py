"""The dashboard as a Django view: Django's login, permissions and CSRF in front of the
Flask app, which renders the pages.

The view checks the user (anonymous: Django's login redirect; without
``celery_durable.view_run``: 403; a POST without ``celery_durable.change_run``: 403, see
``access``), lets ``csrf_protect`` check every POST's
``csrfmiddlewaretoken``, then calls the dashboard's WSGI app with the request's environ,
telling it (``create_app(host_csrf=True)``) which field and token its forms carry and who
acts (recorded with each action). A user who may not act is shown no action.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.http.request import RawPostDataException
from django.middleware.csrf import get_token
from django.utils.crypto import salted_hmac
from django.views.decorators.csrf import csrf_protect
from werkzeug.test import run_wsgi_app

from celery_durable.contrib.django import access
from celery_durable.contrib.django.setup import durable
from celery_durable.ops.dashboard.security import HOST_ACTOR, HOST_CSRF

logger = logging.getLogger("celery_durable.dashboard")
CSRF_FIELD = "csrfmiddlewaretoken"  # the field CsrfViewMiddleware reads
_apps: dict[tuple[str, bool], Any] = {}
_apps_lock = threading.Lock()


def dashboard_app(mount: str, read_only: bool) -> Any:
    """The Flask app for pages under ``mount`` (``/durable/``), made once per process."""
    key = (mount, read_only)
    with _apps_lock:
        if key not in _apps:
            from celery_durable.ops.dashboard.web import create_app  # noqa: PLC0415 - the extra

            _apps[key] = create_app(
                durable(),
                read_only=read_only,
                url_prefix=mount,
                # Every process of the site signs the notices after an action alike.
                secret_key=salted_hmac("celery_durable.dashboard", "notices").hexdigest(),
                host_csrf=True,
            )
        return _apps[key]


def wsgi_str(text: str) -> str:
    """A path as WSGI carries it: its UTF-8 bytes, one character each."""
    return text.encode("utf-8").decode("latin-1")


def environ_of(request: HttpRequest, body: bytes) -> dict[str, Any]:
    environ = dict(request.META)
    script_name = request.path[: len(request.path) - len(request.path_info)]
    environ.update(
        {
            "SCRIPT_NAME": wsgi_str(script_name),
            "PATH_INFO": wsgi_str(request.path_info),
            "CONTENT_LENGTH": str(len(body)),
            # Django read the body (CSRF reads the form): the app gets a fresh stream.
            "wsgi.input": io.BytesIO(body),
            HOST_CSRF: (CSRF_FIELD, get_token(request)),
            HOST_ACTOR: request.user.get_username(),
        }
    )
    # What an ASGI request's META lacks and a WSGI app reads.
    environ.setdefault("wsgi.version", (1, 0))
    environ.setdefault("wsgi.url_scheme", request.scheme)
    environ.setdefault("wsgi.errors", sys.stderr)
    environ.setdefault("wsgi.multithread", True)
    environ.setdefault("wsgi.multiprocess", True)
    environ.setdefault("wsgi.run_once", False)
    environ.setdefault("SERVER_NAME", request.get_host().rsplit(":", 1)[0])
    environ.setdefault("SERVER_PORT", request.get_port())
    return environ


@csrf_protect
def dashboard(request: HttpRequest, path: str = "") -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not access.may_view(request.user):
        raise PermissionDenied
    acts = access.may_act(request.user)
    if request.method == "POST" and not acts:
        raise PermissionDenied
    try:
        body = request.body
    except RawPostDataException:  # a multipart POST, which no dashboard form sends
        return HttpResponseBadRequest("the dashboard takes form-encoded POSTs only\n")
    mount = request.path_info[: len(request.path_info) - len(path)]
    if request.method == "POST":
        logger.info("dashboard: %s by %s", request.path_info, request.user.get_username())
    app = dashboard_app(mount, not acts)
    chunks, status, headers = run_wsgi_app(app, environ_of(request, body), buffered=True)
    try:
        content = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    code, _, reason = status.partition(" ")
    response = HttpResponse(content, status=int(code), reason=reason or None)
    for name, value in headers.items():
        if name.lower() == "set-cookie":
            response.cookies.load(value)
        else:
            response[name] = value
    return response
