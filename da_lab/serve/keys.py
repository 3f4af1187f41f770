"""`--api-key` over every route of the server, not only vLLM's /v1 prefix.

vLLM's own key check guards paths under /v1, /v2 and /inference; its other routes
(/invocations, which generates; /tokenize, /detokenize, /generative_scoring, /scale_elastic_ep,
...) stay open. `da-lab serve --api-key` is ours, so this middleware asks for the key on every
path except a short allow-list of routes that run no model and change no state, and
`routes()` lists the app's real routes at start (GET /da/routes) so what stays open is read
from the app, not from a hand list of what is guarded.
"""

from __future__ import annotations

import json

# Open without the key, and why (docs/serving.md repeats this).
OPEN = {
    "/health": "liveness for load balancers and `da-lab serve` itself; runs nothing",
    "/ping": "SageMaker's health check, the same answer as /health",
    "/metrics": "Prometheus scrapes (vLLM leaves it open too); counts, no request content",
    "/version": "the vLLM version string",
    "/openapi.json": "the API's description (no model runs)",
    "/docs": "the API's description (no model runs)",
    "/docs/oauth2-redirect": "part of /docs",
    "/redoc": "the API's description (no model runs)",
}
UNAUTHORIZED = json.dumps({"error": "Unauthorized"}).encode()


def _path(scope) -> str:
    path = scope.get("path", "") or "/"
    root = scope.get("root_path", "") or ""
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    return path.rstrip("/") or "/"


def routes(app) -> dict:
    """{"open": {path: why}, "guarded": [paths]} of the app's routes (mounts by their prefix)."""
    paths = sorted({getattr(r, "path", None) or getattr(r, "path_format", "")
                    for r in getattr(app, "routes", ())} - {""})
    return {"open": {p: OPEN[p] for p in paths if p in OPEN},
            "guarded": [p for p in paths if p not in OPEN]}


class KeyGuard:
    """ASGI middleware: with keys set, a request to any path outside OPEN needs
    `Authorization: Bearer KEY` (vLLM's rule); OPTIONS passes, as in vLLM (CORS preflight)."""

    def __init__(self, app, plugin) -> None:
        self.app, self.plugin = app, plugin

    async def __call__(self, scope, receive, send):
        kind = scope.get("type")
        if (kind not in ("http", "websocket") or scope.get("method") == "OPTIONS"
                or not self.plugin.key_hashes or _path(scope) in OPEN):
            return await self.app(scope, receive, send)
        header = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if self.plugin.authorized(header.decode("latin-1")):
            return await self.app(scope, receive, send)
        if kind == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(UNAUTHORIZED)).encode())]})
        await send({"type": "http.response.body", "body": UNAUTHORIZED, "more_body": False})
