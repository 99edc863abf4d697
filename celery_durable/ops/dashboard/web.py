"""The dashboard as a Flask (WSGI) application: pages, partials for live refresh, actions.

Every action is a POST that carries the CSRF token, is refused in read-only mode, and
redirects to the run's page (a schedule's: the schedules page) with one line saying what
happened.

Example::

    app = create_app(durable, basic_auth="ops:s3cret", read_only=False)
    app.run(port=5580)        # or mount it: DispatcherMiddleware(site, {"/durable": app})
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from flask import (
    Blueprint,
    Flask,
    Response,
    abort,
    flash,
    g,
    redirect,
    render_template,
    request,
    url_for,
)
from flask.sessions import SecureCookieSessionInterface
from werkzeug.exceptions import HTTPException, InternalServerError
from werkzeug.middleware.proxy_fix import ProxyFix

from celery_durable.core.redact import redactor_of
from celery_durable.errors import DurableError, WorkflowAlreadyExists
from celery_durable.ops import console
from celery_durable.ops.dashboard import pages, security
from celery_durable.ops.dashboard.values import STATUS_ICONS
from celery_durable.ops.wing_parts import (
    WING_PARTS,
    DashboardActions,
    DashboardEvents,
    DashboardPage,
)
from celery_durable.store import ALL_STATUSES, is_unreachable

logger = logging.getLogger("celery_durable.dashboard")
HERE = os.path.dirname(os.path.abspath(__file__))

if TYPE_CHECKING:
    from celery_durable.ops.operations import Operations


class SchemeSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie session, its cookie ``Secure`` whenever the request came over
    https (as the client saw it: behind a proxy, through ``X-Forwarded-Proto``)."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(request.is_secure) or super().get_cookie_secure(app)


def create_app(
    durable: Operations,
    *,
    read_only: bool = False,
    basic_auth: str | None = None,
    url_prefix: str = "",
    secret_key: bytes | str | None = None,
    refresh_seconds: float = 3.0,
    host_csrf: bool = False,
    allowed_hosts: str | Collection[str] | None = None,
    trusted_proxies: int = 0,
) -> Flask:
    """The dashboard for ``durable`` as a Flask app (a WSGI callable).

    ``basic_auth``: Flower's ``user:password[,user:password]``; ``url_prefix``: where its
    pages live (``/durable``); ``secret_key``: signs the one-line notices after actions
    (random by default; give one when several processes serve the dashboard).
    ``host_csrf``: the web framework it is mounted in checks every POST's CSRF token before
    calling it, and puts the form field and token to render in the WSGI environ
    (``HOST_CSRF``); the dashboard's own
    double-submit check is then off, and a POST arriving without that key is refused.
    ``allowed_hosts``: the names the Host header may give (``"ops.example.com,.corp"``;
    ``"*"``: any); None: loopback only, or, with ``host_csrf``, whatever the framework
    allowed (Django's ALLOWED_HOSTS). ``trusted_proxies``: how many reverse proxies in
    front set ``X-Forwarded-For/Proto/Host/Port/Prefix``, which are then honoured
    (Werkzeug's ProxyFix): the Host checked is the public one, and cookies are
    ``Secure`` when the client's scheme is https."""
    users = security.parse_basic_auth(basic_auth)
    hosts: tuple[str, ...]
    if allowed_hosts is None:
        hosts = (security.ANY_HOST,) if host_csrf else security.LOOPBACK_HOSTS
    else:
        hosts = security.parse_hosts(allowed_hosts)
    prefix = "/" + url_prefix.strip("/") if url_prefix.strip("/") else ""
    app = Flask(__name__, static_folder=None, template_folder=os.path.join(HERE, "templates"))
    app.secret_key = secret_key or os.urandom(32)
    app.session_interface = SchemeSessionInterface()
    if trusted_proxies:
        n = trusted_proxies
        proxied = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n, x_port=n, x_prefix=n)
        app.wsgi_app = proxied  # type: ignore[method-assign]
    app.config.update(
        SESSION_COOKIE_NAME="durable_session",
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_PATH=prefix or "/",
    )
    app.extensions["celery_durable"] = durable
    redact = redactor_of(durable.runtime.app.conf.get("durable_redact"))
    pages_bp = Blueprint(
        "durable",
        __name__,
        static_folder=os.path.join(HERE, "static"),
        static_url_path="/static",
    )

    @app.before_request
    def guard() -> Response | None:
        if not security.host_allowed(request.host, hosts):
            # Before anything else: a rebound DNS name must not even get a login prompt.
            return Response(
                f"Refused: this dashboard does not answer to Host {request.host!r}; give "
                "its name in --allowed-hosts (allowed_hosts=)\n",
                400,
            )
        if not security.allowed(users, request.authorization):
            return Response(
                "Authentication required\n",
                401,
                {"WWW-Authenticate": 'Basic realm="celery_durable", charset="UTF-8"'},
            )
        if host_csrf:
            given = security.host_csrf(request.environ)
            if given is None and request.method == "POST":
                return Response("Refused: the host checked no CSRF token\n", 403)
            g.csrf_field, g.host_csrf = given or (security.CSRF_FIELD, "")
            return None
        g.csrf = request.cookies.get(security.CSRF_COOKIE) or security.new_token()
        if request.method == "POST":
            submitted = request.form.get(security.CSRF_FIELD)
            cookie = request.cookies.get(security.CSRF_COOKIE)
            origin = request.headers.get("Origin")
            if not security.same_origin(origin, request.host):
                return Response(
                    f"Refused: the form came from {origin}, not from this dashboard's host "
                    f"{request.host!r}; behind a reverse proxy that rewrites Host, give "
                    "--trusted-proxies so that X-Forwarded-Host is honoured\n",
                    403,
                )
            if not security.csrf_ok(cookie, submitted):
                return Response("Refused: missing or wrong CSRF token\n", 403)
        return None

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers.update(security.SECURITY_HEADERS)
        if request.cookies.get(security.CSRF_COOKIE) != g.get("csrf"):
            if g.get("csrf"):
                response.set_cookie(
                    security.CSRF_COOKIE,
                    g.csrf,
                    httponly=True,
                    samesite="Strict",
                    secure=request.is_secure,
                    path=prefix or "/",
                )
        return response

    @app.context_processor
    def helpers() -> dict[str, Any]:
        return {
            "csrf_token": lambda: g.get("host_csrf") or g.get("csrf", ""),
            "csrf_field": g.get("csrf_field", security.CSRF_FIELD),
            "read_only": read_only,
            "statuses": ALL_STATUSES,
            "refresh_ms": int(refresh_seconds * 1000),
            "page_url": page_url,
            "wing_pages": WING_PARTS.pages,
        }

    def page_url(**changes: Any) -> str:
        """This runs page's URL with ``changes`` to its query (None removes a key)."""
        query: dict[str, Any] = request.args.to_dict(flat=False)
        query.pop("partial", None)
        for key, value in changes.items():
            if value is None:
                query.pop(key, None)
            else:
                query[key] = [value]
        return url_for("durable.runs", **query)

    @app.errorhandler(Exception)
    def unavailable(exc: Exception) -> Any:
        if isinstance(exc, HTTPException):
            return exc
        if not is_unreachable(exc):
            logger.error("dashboard: %s %s failed", request.method, request.path, exc_info=exc)
            return InternalServerError()
        return render_template("error.html", message=console.error_summary(str(exc))), 503

    @pages_bp.get("/")
    def runs() -> Any:
        stats = durable.stats()
        args = {
            "status": request.args.getlist("status"),
            **{k: request.args.get(k) for k in ("workflow", "since", "until", "q", "after")},
        }
        error = None
        try:
            table = pages.runs_page(durable, args, stats)
        except DurableError as exc:
            error = str(exc)
            table = pages.runs_page(durable, {}, stats)
            table["filters"].update({k: args.get(k) or "" for k in ("workflow", "q")})
        template = "_runs_live.html" if request.args.get("partial") else "runs.html"
        return render_template(template, summary=pages.summary(stats), table=table, error=error)

    @pages_bp.get("/run/<path:run_id>")
    def run(run_id: str) -> Any:
        asked = request.args.get("steps_from", "")
        steps_from = int(asked) if asked.isdigit() and len(asked) < 10 else None
        shown = pages.run_page(durable, run_id, redact, steps_from=steps_from)
        if shown is None:
            abort(404, f"no workflow run {run_id!r}")
        template = "_run_live.html" if request.args.get("partial") else "run.html"
        return render_template(template, run=shown)

    @pages_bp.get("/value")
    def value() -> Any:
        run_id, what = request.args.get("id", ""), request.args.get("what", "")
        text = pages.full_value(durable, run_id, what, redact)
        if text is None:
            abort(404, "no such value")
        return render_template("value.html", run_id=run_id, what=what, text=text)

    @pages_bp.get("/workflows")
    def workflows() -> Any:
        rows = pages.workflows_page(durable, durable.stats())
        shown = WING_PARTS.sections_of("workflows", durable)
        return render_template("workflows.html", rows=rows, **shown)

    def wing_page(page: DashboardPage) -> None:
        def view() -> Any:
            return render_template(page.template, rows=page.read(durable))

        pages_bp.add_url_rule(page.rule, page.endpoint, view, methods=["GET"])

    def wing_actions(actions: DashboardActions) -> None:
        def act(verb: str) -> Any:
            if read_only:
                return Response("Refused: the dashboard is read-only\n", 403)
            if verb not in actions.verbs:
                abort(404)
            name = request.form.get("name", "")
            try:
                flash(actions.act(durable, verb, name), "ok")
            except DurableError as exc:
                flash(f"Cannot {verb}: {exc}", "error")
            return redirect(url_for(f"durable.{actions.back}"), 303)

        pages_bp.add_url_rule(actions.rule, actions.endpoint, act, methods=["POST"])

    def wing_events(events: DashboardEvents) -> None:
        def view() -> Any:
            last = request.headers.get("Last-Event-ID")
            try:
                chunks = events.open(durable, last, request.args.to_dict())
            except LookupError as exc:
                abort(404, str(exc))
            except ValueError as exc:  # InvalidArgument
                abort(400, str(exc))
            # No buffering on the way (nginx): each event goes out as it is written.
            headers = {"X-Accel-Buffering": "no"}
            return Response(chunks, mimetype="text/event-stream", headers=headers)

        pages_bp.add_url_rule(events.rule, events.endpoint, view, methods=["GET"])

    for page in WING_PARTS.pages:
        wing_page(page)
    for events in WING_PARTS.events:
        wing_events(events)
    for actions in WING_PARTS.actions:
        wing_actions(actions)

    def noted(run_id: str, action: str, detail: str | None = None) -> str:
        """Record who did ``action`` in the run's actions log; what to add to the notice
        if that failed (the action itself was done)."""
        who = security.actor(request.environ, users, request.authorization)
        try:
            durable.record_action(run_id, action, who, detail)
        except Exception as exc:  # noqa: BLE001 - the action was done: say so, and this
            logger.error("dashboard: %s of %s not recorded", action, run_id, exc_info=exc)
            return " It could not be recorded in the run's actions."
        return ""

    @pages_bp.post("/action/<name>")
    def action(name: str) -> Any:
        if read_only:
            return Response("Refused: the dashboard is read-only\n", 403)
        run_id = request.form.get("id", "")
        target = run_id
        try:
            handle = durable.get_handle(run_id)
            if name == "cancel":
                reason = request.form.get("reason") or None
                status = handle.cancel(reason)
                message = f"Cancel requested: the run is {status}." + noted(run_id, name, reason)
            elif name == "resume":
                handle.resume()
                message = (
                    "Resumed: the run is PENDING and continues at its first unfinished step."
                    + noted(run_id, name)
                )
            elif name == "fork":
                from_step = int(request.form.get("from_step", ""))
                new_id = request.form.get("new_id") or None
                try:
                    forked = handle.fork(from_step, new_id)
                except WorkflowAlreadyExists as exc:
                    raise DurableError(f"a run with id {exc.run_id!r} exists") from None
                target = forked.id
                message = f"Forked from {run_id} at step {from_step}: this new run is PENDING."
                message += noted(run_id, name, f"as run {forked.id} from step {from_step}")
                noted(forked.id, name, f"from run {run_id} at step {from_step}")
            elif name == "signal":
                signal_name = request.form.get("name", "").strip()
                if not signal_name:
                    raise DurableError("give the signal's name")
                try:
                    payload = json.loads(request.form.get("payload") or "null")
                except ValueError as exc:
                    raise DurableError(f"the payload is not JSON: {exc}") from None
                key = request.form.get("idempotency_key") or None
                stored = handle.signal(signal_name, payload, key)
                message = (
                    f"Signal {signal_name!r} stored." + noted(run_id, name, signal_name)
                    if stored
                    else "Nothing stored: this idempotency key was used before."
                )
            else:
                abort(404)
            flash(message, "ok")
        except DurableError as exc:
            flash(f"Cannot {name}: {exc}", "error")
        except ValueError:
            flash("Cannot fork: give the step to fork from as a number.", "error")
        if not run_id:
            return redirect(url_for("durable.runs"))
        return redirect(url_for("durable.run", run_id=target), 303)

    app.register_blueprint(pages_bp, url_prefix=prefix or None)
    if prefix:

        @app.get("/")
        def root() -> Any:
            return redirect(url_for("durable.runs"))

    app.jinja_env.globals["icon"] = lambda status: STATUS_ICONS.get(status, "•")
    return app
