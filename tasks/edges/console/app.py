"""The read-only web console: a Starlette app served by uvicorn (``gpusched console``).

Why this stack: Starlette is the small, well-kept ASGI toolkit FastAPI is
built on (routing, Jinja2 templates, static files from the package, streaming
responses for server-sent events, gzip), and uvicorn is the reference ASGI
server; together they add four small pure-Python packages (starlette,
uvicorn, h11, anyio) and Jinja2 for auto-escaped templates. No JavaScript
framework and nothing from a CDN: the pages are server-rendered HTML, the
cluster map and the live feed are drawn by one static script shipped in the
package (``static/console.js``).

Pages (HTML) and their data (JSON, the same dicts):

=====================  ================================  ==========================
page                   shows                             data
=====================  ================================  ==========================
``/``                  the cluster map                   ``/api/map``
``/workers/{id|name}`` one worker's GPUs and holders     ``/api/workers/{id|name}``
``/requests``          requests by state, searchable     ``/api/requests``
``/requests/{id}``     one request (``describe``)        ``/api/requests/{id}``
``/feed``              live decisions, cluster changes,  ``/api/feed`` (SSE),
                       the audit log's replay status     ``/api/replay-status``
``/health``            health checks and key gauges      ``/api/health``
=====================  ================================  ==========================

Security: the console only reads (give it the read-only ``gpusched-console``
Redis user, ``docs/security.md``); with ``console_basic_auth`` set every
request needs HTTP basic auth; no setting, password or Redis URL is ever
rendered (the partition id is).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from tasks.base.settings import Settings
from tasks.edges.cli_views import age
from tasks.edges.console import data
from tasks.edges.console.feed import FeedHub
from tasks.edges.request_list import STATES, ListQuery
from tasks.state.context import Runtime, build_runtime, redis_client

#: Seconds between two SSE comments on an idle feed (keeps proxies from closing it).
KEEPALIVE_S = 15.0
#: ``/requests?since=`` presets (seconds).
SINCE_CHOICES = {"15m": 900, "1h": 3600, "24h": 86400, "7d": 604800}
#: Rows on the requests page.
PAGE_ROWS = 200


def _package_dir(name: str) -> Path:
    return Path(str(resources.files("tasks.edges.console") / name))


def _no_dispatch(*_: Any) -> None:
    raise RuntimeError("the console is read-only: it sends no task")


class Console:
    """The console's state: one runtime (read only), the feed hub, the templates."""

    def __init__(self, settings: Settings, runtime: Runtime | None = None) -> None:
        self.settings = settings
        self.rt: Runtime = runtime or build_runtime(settings, _no_dispatch, _no_dispatch)
        self.map = data.MapCache()
        self.feed = FeedHub(lambda: redis_client(settings, blocking=True, max_block_ms=2000),
                            self.rt.keys.events)
        self.templates = Jinja2Templates(directory=str(_package_dir("templates")))
        self.templates.env.globals.update(partition=settings.cluster or "default", age=age, states=STATES)
        self.templates.env.filters["gib"] = lambda amount: f"{(amount or 0) / (1 << 30):.1f}"

    def page(self, request: Request, name: str, **context: Any) -> Response:
        """A rendered page (``name`` picks the navigation tab; ``missing`` answers 404)."""
        status = 404 if name == "missing" else 200
        return self.templates.TemplateResponse(request, f"{name}.html", {"page": name, **context},
                                               status_code=status)


class BasicAuth:
    """ASGI middleware: every HTTP request needs ``Authorization: Basic`` matching ``user:password``."""

    def __init__(self, app: ASGIApp, credentials: str) -> None:
        self.app = app
        self._expected = credentials.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(dict(scope["headers"]).get(b"authorization", b"")):
            await self.app(scope, receive, send)
            return
        refusal = PlainTextResponse("authentication required\n", status_code=401,
                                    headers={"WWW-Authenticate": 'Basic realm="gpusched console"'})
        await refusal(scope, receive, send)

    def _allowed(self, header: bytes) -> bool:
        scheme, _, encoded = header.partition(b" ")
        if scheme.lower() != b"basic":
            return False
        try:
            given = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, self._expected)


def _query(request: Request) -> ListQuery:
    params = request.query_params
    state = params.get("state") if params.get("state") in STATES else None
    since = SINCE_CHOICES.get(params.get("since") or "")
    now_ms = int(time.time() * 1000)
    return ListQuery(state=state, reason=params.get("reason") or None, search=params.get("q") or None,
                     since_ms=now_ms - since * 1000 if since else None, limit=PAGE_ROWS)


async def _off_loop(work: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking Redis read on the thread pool (the event loop keeps serving the feed)."""
    return await run_in_threadpool(work, *args)


def _found(value: Any, what: str) -> Response:
    return JSONResponse(value) if value is not None else JSONResponse({"error": f"no such {what}"}, 404)


class Pages:
    """The console's endpoints: each page renders the same data its ``/api/`` twin returns."""

    def __init__(self, console: Console) -> None:
        self.c = console

    async def map_page(self, request: Request) -> Response:
        return self.c.page(request, "map")

    async def map_api(self, request: Request) -> Response:
        return Response(await _off_loop(self.c.map.encoded, self.c.rt), media_type="application/json")

    async def worker_page(self, request: Request) -> Response:
        name = request.path_params["worker"]
        found = await _off_loop(data.worker_data, self.c.rt, name)
        if found is None:
            return self.c.page(request, "missing", what=f"worker {name}")
        return self.c.page(request, "worker", **found)

    async def worker_api(self, request: Request) -> Response:
        return _found(await _off_loop(data.worker_data, self.c.rt, request.path_params["worker"]), "worker")

    async def requests_page(self, request: Request) -> Response:
        listing = await _off_loop(data.requests_data, self.c.rt, _query(request))
        return self.c.page(request, "requests", listing=listing, query=request.query_params,
                           since_choices=list(SINCE_CHOICES))

    async def requests_api(self, request: Request) -> Response:
        return JSONResponse(await _off_loop(data.requests_data, self.c.rt, _query(request)))

    async def request_page(self, request: Request) -> Response:
        rid = request.path_params["request_id"]
        info = await _off_loop(data.request_data, self.c.rt, rid)
        if info is None:
            return self.c.page(request, "missing", what=f"request {rid}")
        return self.c.page(request, "request", info=info)

    async def request_api(self, request: Request) -> Response:
        return _found(await _off_loop(data.request_data, self.c.rt, request.path_params["request_id"]),
                      "request")

    async def feed_page(self, request: Request) -> Response:
        return self.c.page(request, "feed", replay=await _off_loop(data.replay_status, self.c.rt))

    async def replay_api(self, request: Request) -> Response:
        return JSONResponse(await _off_loop(data.replay_status, self.c.rt))

    async def health_page(self, request: Request) -> Response:
        health = await _off_loop(data.health_data, self.c.rt)
        return self.c.page(request, "health", health=health, gauge=data.gauge)

    async def health_api(self, request: Request) -> Response:
        return JSONResponse(await _off_loop(data.health_data, self.c.rt))

    async def feed_api(self, request: Request) -> Response:
        return await _event_stream(self.c.feed)


def routes(console: Console) -> list[Any]:
    """Every route of the console."""
    p = Pages(console)
    table = [
        ("/", p.map_page), ("/api/map", p.map_api),
        ("/workers/{worker}", p.worker_page), ("/api/workers/{worker}", p.worker_api),
        ("/requests", p.requests_page), ("/api/requests", p.requests_api),
        ("/requests/{request_id:path}", p.request_page), ("/api/requests/{request_id:path}", p.request_api),
        ("/feed", p.feed_page), ("/api/replay-status", p.replay_api), ("/api/feed", p.feed_api),
        ("/health", p.health_page), ("/api/health", p.health_api),
    ]
    static = StaticFiles(directory=str(_package_dir("static")))
    return [*(Route(path, endpoint) for path, endpoint in table), Mount("/static", static, name="static")]


async def _event_stream(hub: FeedHub) -> Response:
    subscriber = hub.subscribe(asyncio.get_running_loop())
    if subscriber is None:
        return PlainTextResponse("too many open feeds\n", status_code=503)

    async def events() -> AsyncIterator[str]:
        try:
            yield "retry: 2000\n\n"
            while True:
                try:
                    event = await asyncio.wait_for(subscriber.queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                yield f"id: {event['id']}\nevent: {event['kind']}\ndata: {json.dumps(event)}\n\n"
        finally:
            hub.unsubscribe(subscriber)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def create_app(settings: Settings, runtime: Runtime | None = None) -> Starlette:
    """The console app for ``settings``' partition (the feed starts with the app).

    Args:
        runtime: the runtime to read with (tests pass a fakeredis one); None builds one.
    """
    console = Console(settings, runtime)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        console.feed.start()
        yield
        console.feed.stop()

    middleware = [Middleware(GZipMiddleware, minimum_size=2048)]
    if settings.console_basic_auth is not None:
        secret = settings.console_basic_auth.get_secret_value()
        middleware.insert(0, Middleware(BasicAuth, credentials=secret))
    app = Starlette(routes=routes(console), middleware=middleware, lifespan=lifespan)
    app.state.console = console
    return app
