"""Who may look and act: the bearer token or login cookie, CSRF tokens, headers.

Every secret comparison goes through :func:`hmac.compare_digest`. The login
cookie holds an HMAC of the token under a key made at start-up, never the
token itself; the CSRF token is an HMAC of the session cookie under the same
key, so a page of another site can neither read nor forge it (and the
Origin check refuses its posts first).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.requests import Request

__all__ = ["AUTH_COOKIE", "SESSION_COOKIE", "Guard", "SecurityHeaders"]

AUTH_COOKIE = "alkstore_auth"
SESSION_COOKIE = "alkstore_session"

_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


class Guard:
    """Checks requests against the token (if any) and posts against CSRF."""

    def __init__(self, token: str | None) -> None:
        if token is not None and (not isinstance(token, str) or not token):
            raise ValueError("token must be a non-empty str or None")
        self._token = token
        self._key = secrets.token_bytes(32)

    @property
    def requires_login(self) -> bool:
        return self._token is not None

    def _mac(self, purpose: str, value: str) -> str:
        return hmac.new(self._key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def admits(self, request: Request) -> bool:
        """True without a token, or with the right bearer token or login cookie."""
        if self._token is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), self._token.encode()):
            return True
        cookie = request.cookies.get(AUTH_COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self.login_cookie().encode())

    def token_matches(self, given: str) -> bool:
        """True if ``given`` (the login form's) is the token."""
        return self._token is not None and hmac.compare_digest(given.encode(), self._token.encode())

    def login_cookie(self) -> str:
        return self._mac("auth", self._token or "")

    def csrf_token(self, session: str) -> str:
        return self._mac("csrf", session)

    def same_origin(self, request: Request) -> bool:
        """True if the Origin (else the Referer) header names this very site."""
        ours = f"{request.url.scheme}://{request.url.netloc}"
        origin = request.headers.get("origin")
        if origin is not None:
            return origin == ours
        referer = request.headers.get("referer", "")
        return referer == ours or referer.startswith(ours + "/")

    def csrf_ok(self, request: Request, form: dict[str, str]) -> bool:
        """True if the post comes from this site with the session's CSRF token."""
        session = request.cookies.get(SESSION_COOKIE, "")
        given = form.get("csrf", "")
        return (
            bool(session)
            and self.same_origin(request)
            and hmac.compare_digest(given.encode(), self.csrf_token(session).encode())
        )

    def __repr__(self) -> str:
        return f"<Guard {'token required' if self._token else 'open'}>"


_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class SecurityHeaders:
    """ASGI middleware: every response gets the CSP and its companions."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)
