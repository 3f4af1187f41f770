"""serve/gate.py's install on stand-ins for vLLM's app.state: every serving handler the DA
checks run at is wrapped, and a server whose vLLM lacks one (a renamed handler) refuses to
start with one line naming it and the release, instead of serving that route with DA off."""

import asyncio
from types import SimpleNamespace

import pytest

from da_lab.core.wire import EXTRA_LAYOUT
from da_lab.serve import gate
from da_lab.serve.edge import EdgeError
from da_lab.versions.needs_engine import SERVE_HANDLERS
from da_lab.versions.releases import engine_name


class _Handler:
    """A serving handler with the methods vLLM's have (each returns what it was given)."""

    async def create_completion(self, request, raw=None):
        return request

    async def create_chat_completion(self, request, raw=None):
        return request

    async def create_batch_chat_completion(self, request, raw=None):
        return request

    async def create_responses(self, request, raw=None):
        return request


def _state(**override):
    handlers = {attr: _Handler() for attr, _ in gate.HANDLERS}
    handlers.update(override)
    return SimpleNamespace(**{k: v for k, v in handlers.items() if v is not _GONE})


_GONE = object()
_PLUGIN = SimpleNamespace(edge=SimpleNamespace(block_size=32, rejected={}))


def test_install_wraps_every_door_once_and_the_door_checks():
    state = _state()
    done = gate.install(state, _PLUGIN)
    assert done == [f"{attr}.{name}" for attr, name in gate.HANDLERS]
    assert gate.install(state, _PLUGIN) == []                  # never wrapped twice
    beam = SimpleNamespace(vllm_xargs={EXTRA_LAYOUT: {}}, use_beam_search=True)
    with pytest.raises(EdgeError, match="beam search"):
        asyncio.run(state.openai_serving_completion.create_completion(beam))
    plain = SimpleNamespace(vllm_xargs=None)
    assert asyncio.run(state.openai_serving_chat.create_chat_completion(plain)) is plain


class _Renamed(_Handler):
    """vLLM's chat handler after a release renamed its method."""
    create_chat_completion = None

    async def create_chat(self, request, raw=None):
        return request


def test_a_renamed_handler_refuses_the_start_naming_it_and_the_release():
    state = _state(openai_serving_chat=_Renamed())
    with pytest.raises(gate.MissingDoor) as err:
        gate.install(state, _PLUGIN)
    msg = str(err.value)
    assert "\n" not in msg
    assert "app.state.openai_serving_chat.create_chat_completion (_Renamed)" in msg
    assert engine_name() in msg and "does not start" in msg
    # nothing was wrapped: the server stops here, it does not run half-gated
    assert not getattr(state.openai_serving_completion.create_completion, "_da_door", False)


def test_a_missing_state_attribute_refuses_and_a_task_not_served_does_not():
    with pytest.raises(gate.MissingDoor, match=r"app\.state\.openai_serving_responses\b"):
        gate.install(_state(openai_serving_responses=_GONE), _PLUGIN)
    # None: this server runs no such task, so vLLM answers that route itself
    state = _state(openai_serving_responses=None)
    assert "openai_serving_responses.create_responses" not in gate.install(state, _PLUGIN)


def test_every_door_is_a_declared_need():
    """Each handler method the gate wraps is declared (versions/needs_engine.py), so every
    release's manifest is checked for it (tests/test_vllm_manifests.py) before any server
    starts on it."""
    assert [name for _, name in gate.HANDLERS] == [m for _, m in SERVE_HANDLERS]
