"""A model the DA hook refuses (sliding-window attention), served by `da-lab serve`: the server
starts and serves plain requests; a request with a DA layout is an HTTP 400 saying why."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from serve_fixture import Server


@pytest.fixture(scope="module")
def refused_server(tmp_path_factory, tiny_model):
    """The tiny model's weights under a Mistral config with a 64-token sliding window."""
    tmp = tmp_path_factory.mktemp("serve_refused")
    folder = tmp / "sliding-window-model"
    folder.mkdir()
    for f in Path(tiny_model).iterdir():
        if f.name != "config.json":
            (folder / f.name).symlink_to(f)
    cfg = json.loads((Path(tiny_model) / "config.json").read_text())
    cfg.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=64)
    (folder / "config.json").write_text(json.dumps(cfg))
    s = Server(tmp, ["--model", str(folder), "--max-model-len", "1024"])
    yield s
    s.stop()


def test_a_layout_on_a_refused_model_is_400_and_plain_requests_run(refused_server):
    url = refused_server.url
    status = httpx.get(url + "/da/status").json()
    assert "sliding window" in status["disabled"]
    model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
    ids = list(range(5, 205))
    layout = json.dumps({"block_size": 32, "head_blocks": 1, "chunk_blocks": [2, 2]})
    for stream in (False, True):
        r = httpx.post(url + "/v1/completions", timeout=60, json={
            "model": model, "prompt": ids, "max_tokens": 4, "stream": stream,
            "vllm_xargs": {"da_layout": layout}})
        assert r.status_code == 400, r.text
        msg = r.json()["error"]["message"]
        assert "DA is off on this server" in msg and "sliding window" in msg
    plain = httpx.post(url + "/v1/completions", timeout=60, json={
        "model": model, "prompt": ids, "max_tokens": 4, "ignore_eos": True})
    assert plain.status_code == 200
    assert plain.json()["usage"]["completion_tokens"] == 4
    m = httpx.get(url + "/metrics").text
    assert 'da_lab:requests_rejected_total{model_name="' in m and 'reason="disabled"} 2.0' in m
