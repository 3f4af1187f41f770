"""da_lab's endpoint plugin: DA inside `vllm serve`, in the API server process.

vLLM (0.26 and 0.32) loads entry points of the group `vllm.endpoint_plugins` into its OpenAI API
server when VLLM_PLUGINS names them (`VLLM_PLUGINS=da_lab`; `da-lab serve` sets it). The
contract: `attach_router(app)` adds routes, `init_state(engine_client, ...)` prepares them,
and engine-side behaviour comes from a general plugin reached with
`engine_client.collective_rpc` — here the hook's worker method `da_lab_rpc` (hook/service.py).

What it adds:
  - the edge (edge.py): every request is checked in `engine_client.generate` before it reaches
    the engine; a bad DA request is an HTTP 400 naming the problem;
  - GET /da/requests/{da_id}: one request's DA stats (blocks read vs in the row, the tags it
    wrote, mode switches, malformed tags, flags): how a client gets them once its stream ends;
  - GET /da/status and GET /da/state: what the hook says about this engine (DA on or off and
    why, runner, backend, block size) and the live per-request state on every rank;
  - DA series on /metrics (metrics.py), refreshed from the engine right before each scrape.

Why an endpoint for per-request stats: they are counted in the worker process (two process hops
from the API server); vLLM's per-request output path (EngineCoreOutput -> RequestOutput ->
response) has no field a plugin may fill without patching the scheduler and the output
processor of each version. A named worker method behind a plugin route is the channel vLLM's
plugin contract offers, and works alike for streamed and whole responses and for TP ranks.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets

from da_lab.serve import gate, keys
from da_lab.serve.edge import Edge
from da_lab.serve.metrics import DACollector, register

# Under vLLM's logger, so these lines come out with vLLM's own handlers and format.
log = logging.getLogger("vllm.da_lab")
RPC = "da_lab_rpc"
RPC_TIMEOUT_S = 10.0
RETRY_AFTER_S = 5      # what a 503 asks a client to wait before asking again


class RefreshOnScrape:
    """ASGI middleware: before GET /metrics is answered, fetch the engine's DA counters."""

    def __init__(self, app, plugin: DAEndpoints) -> None:
        self.app, self.plugin = app, plugin

    async def __call__(self, scope, receive, send):
        if scope.get("type") == "http" and scope.get("path", "").rstrip("/") == "/metrics":
            await self.plugin.refresh_metrics()
        await self.app(scope, receive, send)


class DAEndpoints:
    name = "da_lab"
    required_tasks = ("generate",)

    def __init__(self) -> None:
        self.engine_client = None
        self.status: dict = {}
        self.edge: Edge | None = None
        self.collector: DACollector | None = None
        self.key_hashes: list[bytes] = []     # --api-key / VLLM_API_KEY: guards every route
        self.app = None                       # but keys.OPEN (keys.py)
        self.doors: list[str] = []            # the serving handlers gate.py checks

    # ---- vLLM's endpoint-plugin contract ---------------------------------------------------
    def attach_router(self, app) -> None:
        self.app = app
        app.include_router(self._router())
        app.add_middleware(RefreshOnScrape, plugin=self)
        app.add_middleware(gate.ErrorEvents, plugin=self)
        app.add_middleware(keys.KeyGuard, plugin=self)

    async def init_state(self, engine_client, state, args) -> None:
        if engine_client is None:         # vLLM's CPU-only render server: no engine
            return
        self.engine_client = engine_client
        self.key_hashes = api_key_hashes(args)
        ranks = await self.rpc("status")      # also switches the workers to serve mode
        self.status = dict(ranks[0], ranks=len(ranks))
        cfg = engine_client.vllm_config
        self.status["block_size"] = cfg.cache_config.block_size
        self.status["model"] = getattr(cfg.model_config, "served_model_name", None) or \
            cfg.model_config.model
        self.edge = Edge(block_size=self.status["block_size"],
                         vocab_size=self.status.get("vocab_size") or 0,
                         disabled=self.status.get("disabled"),
                         tokenizer=_tokenizer(engine_client))
        self.edge.install(engine_client)
        self.doors = gate.install(state, self)
        self.collector = DACollector(str(self.status["model"]), self.edge.rejected)
        register(self.collector)
        state.da_lab = self
        if self.status.get("disabled"):
            log.warning("da_lab: DA is off on this server (DA requests get HTTP 400): %s",
                        self.status["disabled"])

    # ---- engine access ---------------------------------------------------------------------
    async def rpc(self, op: str, *args) -> list:
        return await asyncio.wait_for(
            self.engine_client.collective_rpc(RPC, args=(op, *args)), RPC_TIMEOUT_S)

    async def ask(self, op: str, *args):
        """The ranks' answers to `op`, or a 503 saying why there are none: the engine did not
        answer within RPC_TIMEOUT_S (a long step holds it; the worker answers between steps)
        or is gone. A JSON reason and Retry-After, never a bare 500 with a traceback."""
        from fastapi.responses import JSONResponse

        try:
            return await self.rpc(op, *args)
        except TimeoutError:
            why = (f"the engine did not answer within {RPC_TIMEOUT_S:g} s (it answers between "
                   "steps, and is busy with a long one); ask again")
        except Exception as e:   # noqa: BLE001 - the engine client's own failure, said once
            why = f"the engine could not be asked ({type(e).__name__}: {e})"
        log.warning("da_lab: /da/* %s: %s", op, why)
        return JSONResponse({"error": why, "retry_after_s": RETRY_AFTER_S}, status_code=503,
                            headers={"Retry-After": str(RETRY_AFTER_S)})

    async def refresh_metrics(self) -> None:
        if self.collector is None:
            return
        try:
            self.collector.update((await self.rpc("counters"))[0])
        except Exception as e:   # noqa: BLE001 - a scrape shows the last numbers, never fails
            log.warning("da_lab: could not fetch DA counters from the engine: %s", e)

    def authorized(self, header: str | None) -> bool:
        """vLLM's own rule for its /v1 routes (a bearer token equal to one of the keys),
        applied to /da/*: they name requests' tags, blocks read and prompt lengths."""
        if not self.key_hashes:
            return True
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode()).digest()
        return any(secrets.compare_digest(digest, h) for h in self.key_hashes)

    def _router(self):
        from fastapi import APIRouter, Depends, Header, HTTPException
        from fastapi.responses import JSONResponse

        # Typed with builtins only: annotations are strings here (from __future__), and
        # FastAPI resolves them in this module's globals.
        def guard(authorization: str | None = Header(default=None)) -> None:
            if not self.authorized(authorization):
                raise HTTPException(status_code=401, detail="Unauthorized")

        router = APIRouter(dependencies=[Depends(guard)])

        @router.get("/da/status")
        async def da_status():
            return JSONResponse(self.status)

        @router.get("/da/state")
        async def da_state():
            per_rank = await self.ask("state")
            if isinstance(per_rank, JSONResponse):
                return per_rank
            return JSONResponse({"ranks": per_rank})

        @router.get("/da/routes")
        async def da_routes():
            # Read from the app now (every router is in by the time a request comes).
            return JSONResponse(dict(keys.routes(self.app), key=bool(self.key_hashes),
                                     doors=self.doors))

        @router.get("/da/requests/{da_id}")
        async def da_request(da_id: str, ranks: str = ""):
            per_rank = await self.ask("request", da_id)
            if isinstance(per_rank, JSONResponse):
                return per_rank
            stats = per_rank[0]
            broken = [r for r in per_rank if isinstance(r, dict) and set(r) == {"error"}]
            if broken:                     # the worker method failed: say so, the engine lives
                return JSONResponse(broken[0], status_code=500)
            if ranks == "all" and any(r is not None for r in per_rank):
                return JSONResponse({"ranks": per_rank})   # every tensor-parallel rank's own
            if stats is None:
                return JSONResponse({"error": f"no DA request {da_id!r} on this server (ids "
                                              "are kept for the last 256 finished requests)"},
                                    status_code=404)
            return JSONResponse(stats)

        return router


def api_key_hashes(args) -> list[bytes]:
    """sha256 of each API key the server was started with: `--api-key` (one or several)
    before VLLM_API_KEY, as vLLM itself decides."""
    keys = getattr(args, "api_key", None)
    keys = [keys] if isinstance(keys, str) else list(keys or [])
    keys = [k for k in keys or [os.environ.get("VLLM_API_KEY")] if k]
    return [hashlib.sha256(k.encode()).digest() for k in keys]


def _tokenizer(engine_client):
    try:
        return engine_client.get_tokenizer()
    except Exception:   # noqa: BLE001 - no tokenizer (skip_tokenizer_init): ids only
        return None
