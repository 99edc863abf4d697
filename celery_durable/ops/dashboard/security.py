"""Basic auth in Flower's format, CSRF tokens, and the headers every response carries.

``--basic-auth`` takes what Flower's does: ``user:password``, several separated by
commas. CSRF uses a double-submit token: a random value in a ``SameSite=Strict`` cookie
that every POST form must repeat; a POST from another origin is refused too. Mounted in a
framework with CSRF of its own (Django), that framework checks the POSTs instead and
hands the dashboard the field and token its forms carry (``HOST_CSRF``).

The Host header must name this dashboard (``allowed_hosts``, loopback by default): a page
of another site whose name was made to resolve to 127.0.0.1 (DNS rebinding) sends its
own name and is refused before anything else. Nothing beyond loopback is served without
authentication unless asked for (``exposure_refusal``).

Example::

    users = parse_basic_auth("ops:s3cret,admin:pw")
    allowed(users, request.authorization)   # True or False
    host_allowed("evil.example:5580", LOOPBACK_HOSTS)   # False
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

CSRF_COOKIE = "durable_csrf"
CSRF_FIELD = "csrf_token"
# Set by the host framework's view (``create_app(host_csrf=True)``) to ``(field, token)``.
# A client can't put it there: a WSGI server turns request headers into HTTP_* keys only.
HOST_CSRF = "celery_durable.host_csrf"
# Set by the host framework's view to the name of the user who acts (the Django user),
# recorded with each action; like HOST_CSRF, no request header can put it there.
HOST_ACTOR = "celery_durable.actor"
# The names a dashboard answers to unless told others: this machine's loopback.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
ANY_HOST = "*"
# No inline script or style may run: even an escaping bug could not execute a payload.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def parse_basic_auth(option: str | None) -> dict[str, str]:
    """``"user:pass,user2:pass2"`` as ``{user: password}``; ValueError if malformed."""
    if not option:
        return {}
    users: dict[str, str] = {}
    pairs = option.split(",")
    for number, pair in enumerate(pairs, 1):
        user, sep, password = pair.strip().partition(":")
        fault = (not sep and "no ':'") or (not user and "an empty user") or "an empty password"
        if not sep or not user or not password:
            # Named by position, never echoed: the value may hold a password.
            raise ValueError(
                "--basic-auth wants user:password[,user:password]; "
                f"entry {number} of {len(pairs)} has {fault}"
            )
        users[user] = password
    return users


def allowed(users: Mapping[str, str], authorization: Any) -> bool:
    """Whether the request's basic credentials match one user (constant-time compare)."""
    if not users:
        return True
    if authorization is None or authorization.type != "basic":
        return False
    given_user = str(authorization.username or "")
    given_password = str(authorization.password or "")
    ok = False
    for user, password in users.items():
        same_user = hmac.compare_digest(given_user.encode(), user.encode())
        same_password = hmac.compare_digest(given_password.encode(), password.encode())
        ok |= same_user and same_password
    return ok


def new_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_ok(cookie: str | None, submitted: str | None) -> bool:
    """The form repeats the cookie's token."""
    if not cookie or not submitted:
        return False
    return hmac.compare_digest(cookie.encode(), submitted.encode())


def host_csrf(environ: Mapping[str, Any]) -> tuple[str, str] | None:
    """The ``(field, token)`` the host framework put in the environ, if it did."""
    given = environ.get(HOST_CSRF)
    if not (isinstance(given, tuple) and len(given) == 2):
        return None
    field, token = given
    return (field, token) if isinstance(field, str) and isinstance(token, str) else None


def actor(environ: Mapping[str, Any], users: Mapping[str, str], authorization: Any) -> str | None:
    """Who is acting: the user the host framework named, else the basic-auth user (once
    ``allowed`` accepted it); None when nobody authenticated."""
    given = environ.get(HOST_ACTOR)
    if isinstance(given, str) and given:
        return given
    if users and authorization is not None and authorization.username:
        return str(authorization.username)
    return None


def same_origin(origin: str | None, host: str | None) -> bool:
    """A POST's Origin header (when the browser sends one) names this host."""
    if not origin:
        return True
    if origin == "null":
        return False
    return urlsplit(origin).netloc == (host or "")


def parse_hosts(option: str | Collection[str] | None) -> tuple[str, ...]:
    """``"ops.example.com,.internal"`` (or a list) as names: a leading dot allows the
    subdomains, ``*`` any Host."""
    names = option.split(",") if isinstance(option, str) else list(option or ())
    return tuple(name.strip().lower().rstrip(".") for name in names if name.strip())


def host_name(host: str) -> str:
    """The name of a Host header, without its port: ``[::1]:5580`` -> ``::1``."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def host_allowed(host: str | None, allowed: Collection[str]) -> bool:
    """Whether the request's Host names one of ``allowed``."""
    if ANY_HOST in allowed:
        return True
    name = host_name(host or "").lower().rstrip(".")
    if not name:
        return False
    return any(
        name == ref or (ref.startswith(".") and (name.endswith(ref) or name == ref[1:]))
        for ref in allowed
    )


def is_loopback(address: str) -> bool:
    """Whether ``address`` (what the server binds) is reachable from this machine only."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_refusal(address: str, authenticated: bool, allow_unauthenticated: bool) -> str | None:
    """Why serving on ``address`` is refused (None: it is not): beyond loopback, anyone
    who reaches the address could cancel, resume and signal runs."""
    if is_loopback(address) or authenticated or allow_unauthenticated:
        return None
    return (
        f"refusing to serve the dashboard on {address} without authentication: anyone who "
        "can reach it could read every run and cancel, resume or signal them. Give "
        "--basic-auth user:password, or --allow-unauthenticated if something in front of "
        "it (a reverse proxy, a VPN) authenticates"
    )
