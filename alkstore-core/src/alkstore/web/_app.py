"""The dashboard's routes: overview, jobs, one job, and the confirmed actions."""

from __future__ import annotations

import datetime
import json
import logging
import re
import secrets
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from alkstore import AsyncStore, Store
from alkstore._errors import Error
from alkstore.web import _params
from alkstore.web._backlog import Backlog
from alkstore.web._overview import Overview, OverviewRead
from alkstore.web._params import BadRequest
from alkstore.web._security import AUTH_COOKIE, SESSION_COOKIE, Guard, SecurityHeaders
from alkstore.web._shown import exact, shown, visible
from alkstore.web._source import Source

__all__ = ["alkstore_web_app"]

_log = logging.getLogger("alkstore.web")
_HERE = Path(__file__).parent
_MAX_FORM = 4096
_ACTIONS = {
    "requeue": "Requeue dead job {id} of {queue}",
    "requeue_all": "Requeue every dead job of {queue}",
    "cancel": "Cancel (delete) job {id} of {queue}",
    "purge": "Purge (delete) every dead job of {queue}",
}
_HEARTBEAT_S = 10.0
_SSE_LINE_BREAK = re.compile("\r\n|\r|\n")
_STREAM_LIFETIME_S = 60.0
_RECONNECT_MS = 2000
_PAGE_WAIT_S = 0.15
"""How long a page waits for a read of every queue's counts before it shows
the last one (or says one is under way): pages render in under 200 ms."""
_Handler = Callable[[Request], Awaitable[Response]]


def alkstore_web_app(
    store: Store | AsyncStore, *, allow_actions: bool = False, token: str | None = None
) -> Starlette:
    """The dashboard of ``store`` as a Starlette (ASGI) app.

    Serve it with uvicorn, or mount it: ``app.mount("/alkstore",
    alkstore_web_app(store))``. ``token`` requires ``Authorization: Bearer
    <token>`` or a login for every page; ``allow_actions`` enables requeue,
    cancel and purge (each confirmed, CSRF-protected). The store stays the
    caller's to close.
    """
    dashboard = _Dashboard(Source(store), Guard(token), allow_actions=bool(allow_actions))
    routes = [
        Route("/", dashboard.page(dashboard.overview)),
        Route("/live", dashboard.page(dashboard.live)),
        Route("/events", dashboard.page(dashboard.events)),
        Route("/jobs", dashboard.page(dashboard.jobs)),
        Route("/job", dashboard.page(dashboard.job)),
        Route("/confirm", dashboard.page(dashboard.confirm)),
        Route("/act", dashboard.page(dashboard.act), methods=["POST"]),
        Route("/login", dashboard.login, methods=["GET", "POST"]),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: dashboard.http_error, Exception: dashboard.crash},
    )
    app.add_middleware(SecurityHeaders)
    return app


class _Dashboard:
    def __init__(self, source: Source, guard: Guard, *, allow_actions: bool) -> None:
        self.source = source
        self.guard = guard
        self.allow_actions = allow_actions
        self.backlog = Backlog()
        self.reads = Overview(source, self.backlog)
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            finalize=exact,
        )
        self.templates.filters.update(
            when=_when, age=_age, pretty=_pretty, shown=shown, visible=visible
        )

    # Rendering

    def render(self, request: Request, name: str, status: int = 200, **values: Any) -> Response:
        session = request.cookies.get(SESSION_COOKIE) or secrets.token_urlsafe(18)
        response = HTMLResponse(self.html(request, name, session, **values), status)
        if SESSION_COOKIE not in request.cookies:
            _cookie(response, request, SESSION_COOKIE, session)
        return response

    def html(self, request: Request, name: str, session: str, **values: Any) -> str:
        return self.templates.get_template(name).render(
            base=_base(request),
            target=self.source.target,
            engine=self.source.engine,
            allow_actions=self.allow_actions,
            csrf=self.guard.csrf_token(session),
            **values,
        )

    def page(self, handler: _Handler) -> _Handler:
        """``handler`` behind the login, its bad input a 400 page, its store errors a 503."""

        async def guarded(request: Request) -> Response:
            if not self.guard.admits(request):
                return self.render(request, "login.html", 401, failed=False)
            try:
                return await handler(request)
            except BadRequest as exc:
                return self.render(request, "error.html", 400, title="Bad request", detail=str(exc))
            except (ValueError, TypeError) as exc:  # a name the store refuses
                return self.render(request, "error.html", 400, title="Bad request", detail=str(exc))
            except Error as exc:
                _log.warning("alkstore web: %s", exc)
                return self.render(
                    request, "error.html", 503, title="The store did not answer", detail=str(exc)
                )

        return guarded

    async def http_error(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else ""
        return self.render(request, "error.html", status, title=f"Error {status}", detail=detail)

    async def crash(self, request: Request, exc: Exception) -> Response:
        _log.exception("alkstore web: %s %s failed", request.method, request.url.path)
        return HTMLResponse(
            "<!doctype html><title>Internal error</title><h1>Internal error</h1>"
            "<p>The dashboard's log has the details.</p>",
            500,
        )

    # Pages

    def _overview_values(self, read: OverviewRead | None) -> dict[str, Any]:
        """What the overview's templates show of ``read`` (None: no read has ended)."""
        values: dict[str, Any] = {
            "read": read, "failure": self.reads.failure, "period_s": self.reads.period_s,
            "backlog": self.backlog, "now": time.time(),
        }  # fmt: skip
        if read is not None:
            values.update(
                queues=read.queues, streams=read.streams, locks=read.locks,
                schedules=read.schedules, shared=read.took_s >= self.reads.budget_s,
                stale=not self.reads.recent(read),
            )  # fmt: skip
        return values

    async def overview(self, request: Request) -> Response:
        values = self._overview_values(await self.reads.current(_PAGE_WAIT_S))
        return self.render(request, "overview.html", **values)

    async def live(self, request: Request) -> Response:
        values = self._overview_values(await self.reads.current(_PAGE_WAIT_S))
        return self.render(request, "_overview_body.html", **values)

    async def events(self, request: Request) -> Response:
        """The overview's tables as server-sent events, one per read, until the
        client leaves or ``_STREAM_LIFETIME_S`` passes (the browser reconnects)."""
        session = request.cookies.get(SESSION_COOKIE) or ""

        async def stream() -> AsyncIterator[str]:
            yield f"retry: {_RECONNECT_MS}\n\n"
            number, ends = 0, time.monotonic() + _STREAM_LIFETIME_S
            while time.monotonic() < ends:
                read = await self.reads.next_after(number, _HEARTBEAT_S)
                if read is None:
                    yield ": still here\n\n"  # a comment: keeps proxies from timing out
                    continue
                number = read.number
                html = self.html(request, "_overview_body.html", session,
                                 **self._overview_values(read))  # fmt: skip
                yield _event("overview", html)

        return StreamingResponse(
            stream(), media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},  # nginx: pass each event on at once
        )  # fmt: skip

    async def jobs(self, request: Request) -> Response:
        params = request.query_params
        if not params.get("queue"):
            read = await self.reads.current(_PAGE_WAIT_S)
            return self.render(request, "queues.html", read=read, queues=read and read.queues)
        queue = _params.queue_name(params)
        state = _params.state(params)
        limit = _params.page_size(params)
        after = _params.optional_id(params)
        listed = await self.source.jobs(queue, state, limit + 1, after)
        page, more = listed[:limit], len(listed) > limit
        next_url = None
        if more:
            query = {"queue": queue, "state": state or "", "limit": limit, "after": page[-1].id}
            next_url = f"{_base(request)}/jobs?{urllib.parse.urlencode(query)}"
        return self.render(
            request, "jobs.html", queue=queue, state=state, jobs=page, next_url=next_url,
            after=after, states=("pending", "processing", "dead"), now=time.time(),
        )  # fmt: skip

    async def job(self, request: Request) -> Response:
        queue = _params.queue_name(request.query_params)
        job_id = _params.job_id(request.query_params)
        job = await self.source.get_job(queue, job_id)
        if job is None:
            detail = f"no job {job_id} in queue {queue!r} (finished, cancelled or never there)"
            return self.render(request, "error.html", 404, title="No such job", detail=detail)
        return self.render(request, "job.html", job=job, now=time.time())

    async def confirm(self, request: Request) -> Response:
        self._check_actions()
        action, queue, job_id = _action(dict(request.query_params))
        question = Markup(_ACTIONS[action]).format(queue=shown(queue), id=job_id)
        return self.render(
            request, "confirm.html", action=action, queue=queue, job_id=job_id,
            question=question, target_query=_target_query(action, queue, job_id),
        )  # fmt: skip

    async def act(self, request: Request) -> Response:
        self._check_actions()
        form = await _form(request)
        if not self.guard.csrf_ok(request, form):
            return self.render(
                request, "error.html", 403, title="Refused",
                detail="the form is stale or came from another site (CSRF check): reload the page",
            )  # fmt: skip
        action, queue, job_id = _action(_submitted(request, form))
        outcome = await self._perform(action, queue, job_id)
        _log.info("alkstore web: %s on %r (id %s): %s", action, queue, job_id, outcome)
        return self.render(request, "done.html", outcome=outcome, queue=queue, job_id=job_id)

    async def _perform(self, action: str, queue: str, job_id: int | None) -> str:
        if action == "requeue" and job_id is not None:
            moved = await self.source.requeue_dead(queue, [job_id])
            return f"requeued job {job_id}" if moved else f"job {job_id} is not dead: nothing moved"
        if action == "requeue_all":
            return f"requeued {await self.source.requeue_dead(queue, None)} dead jobs"
        if action == "cancel" and job_id is not None:
            done = await self.source.cancel(queue, job_id)
            return f"cancelled job {job_id}" if done else f"job {job_id} was not there"
        return f"purged {await self.source.purge_dead(queue)} dead jobs"

    def _check_actions(self) -> None:
        if not self.allow_actions:
            raise HTTPException(403, "actions are off: start the dashboard with --allow-actions")

    async def login(self, request: Request) -> Response:
        if request.method == "GET" or not self.guard.requires_login:
            if self.guard.admits(request) and self.guard.requires_login:
                return RedirectResponse(f"{_base(request)}/", 303)
            return self.render(request, "login.html", failed=False)
        form = await _form(request)
        if not self.guard.same_origin(request) or not self.guard.token_matches(
            form.get("token", "")
        ):
            return self.render(request, "login.html", 401, failed=True)
        response = RedirectResponse(f"{_base(request)}/", 303)
        _cookie(response, request, AUTH_COOKIE, self.guard.login_cookie())
        return response


def _action(given: dict[str, str]) -> tuple[str, str, int | None]:
    action = given.get("action", "")
    if action not in _ACTIONS:
        raise BadRequest(f"action must be one of {', '.join(_ACTIONS)}, not {action[:40]!r}")
    queue = _params.queue_name(given)
    job_id = _params.job_id(given) if action in ("requeue", "cancel") else None
    return action, queue, job_id


def _target_query(action: str, queue: str, job_id: int | None) -> str:
    """The query string naming what a confirmed action acts on."""
    target = {"action": action, "queue": queue}
    if job_id is not None:
        target["id"] = str(job_id)
    return urllib.parse.urlencode(target, quote_via=urllib.parse.quote)


def _submitted(request: Request, form: dict[str, str]) -> dict[str, str]:
    """What an action's POST asks for: the confirm page puts it in the URL (a
    form field would not carry every name intact: an HTML parser rewrites
    carriage returns); a client may post it as form fields instead, but never
    as both, disagreeing."""
    submitted = dict(request.query_params)
    for field, value in form.items():
        if submitted.setdefault(field, value) != value:
            raise BadRequest(f"the URL and the form disagree on {field!r}")
    return submitted


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form body (no multipart: the dashboard posts nothing else)."""
    body = await request.body()
    if len(body) > _MAX_FORM:
        raise BadRequest("the form is too large")
    try:
        pairs = urllib.parse.parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise BadRequest("the form is not UTF-8") from None
    return dict(pairs)


def _event(name: str, data: str) -> str:
    """One server-sent event; each line of ``data`` its own ``data:`` field.

    Split where the event stream format breaks lines (CR, LF, CRLF) and nowhere
    else: ``str.splitlines`` also splits at U+2028 and the like, which the
    client would then get back as line feeds, inside names."""
    lines = "".join(f"data: {line}\n" for line in _SSE_LINE_BREAK.split(data))
    return f"event: {name}\n{lines}\n"


def _base(request: Request) -> str:
    """The app's own path prefix: "" at the root, "/alkstore" when mounted there."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _cookie(response: Response, request: Request, name: str, value: str) -> None:
    response.set_cookie(
        name, value, path=_base(request) or "/", httponly=True, samesite="strict",
        secure=request.url.scheme == "https",
    )  # fmt: skip


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "—"
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    magnitude = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if magnitude >= size:
            return f"{'-' if seconds < 0 else ''}{magnitude / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def _pretty(payload: object) -> str:
    return json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True, default=repr)
