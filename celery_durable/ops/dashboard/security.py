"""Basic auth in Flower's format, CSRF tokens, and the headers every response carries.

``--basic-auth`` takes what Flower's does: ``user:password``, several separated by
commas. CSRF uses a double-submit token: a random value in a ``SameSite=Strict`` cookie
that every POST form must repeat; a POST from another origin is refused too. Mounted in a
framework with CSRF of its own (Django), that framework checks the POSTs instead and
hands the dashboard the field and token its forms carry (``HOST_CSRF``).

Example::

    users = parse_basic_auth("ops:s3cret,admin:pw")
    allowed(users, request.authorization)   # True or False
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

CSRF_COOKIE = "durable_csrf"
CSRF_FIELD = "csrf_token"
# Set by the host framework's view (``create_app(host_csrf=True)``) to ``(field, token)``.
# A client can't put it there: a WSGI server turns request headers into HTTP_* keys only.
HOST_CSRF = "celery_durable.host_csrf"
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


def same_origin(origin: str | None, host: str | None) -> bool:
    """A POST's Origin header (when the browser sends one) names this host."""
    if not origin:
        return True
    if origin == "null":
        return False
    return urlsplit(origin).netloc == (host or "")
