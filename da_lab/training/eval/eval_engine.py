"""The engine side of `da-lab eval`: many greedy requests in flight at once, and what the hook
did to each of them.

A `Run` is one request: prompt token ids, the DA layout (None: plain attention, the hook leaves
it alone) and an optional director script (tokens forced at output indices). `run_batch` adds
every run, steps the engine until all are done (one engine step serves them all: batching) and
returns each run's text, its hook records and the warnings raised for it. Prompts already in
the KV cache (the same tokens run before) are prefix-cache hits, so a second run of a prompt
costs a few decode steps (DA requests offer only their prompt blocks to the cache:
hook/prefix_cache.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from da_lab.core.layout import BLOCK_SIZE


@dataclass
class Run:
    key: str                              # the caller's name for it (unique in a batch)
    prompt_ids: list[int]
    layout: dict | None = None            # Layout.to_dict(), or None: every block visible
    script: list | None = None            # director: [[output index, [token ids]], ...]


@dataclass
class RunOut:
    text: str = ""
    rows: list = field(default_factory=list)     # the hook's RequestSteps, in step order
    flags: list[str] = field(default_factory=list)


def blocks_for(prompt_lens: list[int], max_tokens: int, wave: int, runs_per_prompt: int,
               block_size: int = BLOCK_SIZE) -> int:
    """KV blocks that hold a wave of the longest prompts: each prompt's blocks once (the runs of
    one prompt share them through the prefix cache) plus every run's own response blocks."""
    longest = max(prompt_lens, default=0)
    per_prompt = -(-longest // block_size) + runs_per_prompt * (-(-max_tokens // block_size) + 1)
    return max(64, min(wave, max(1, len(prompt_lens))) * per_prompt + 16)


def start_lab(model, prompt_lens: list[int], max_tokens: int, wave: int,
              runs_per_prompt: int, async_scheduling: bool = False,
              block_size: int = BLOCK_SIZE):
    """A Lab sized for the eval: no rows recorded (records stay small), no cascade attention
    (GPU: prompts share their system prompt, and DA refuses a shared-prefix kernel), and by
    default no async scheduling (GPU: a tag then applies at the very next step, as on the CPU;
    with it, one step later, so the first token after a tag still reads every block)."""
    from da_lab.engine.env import engine_version
    from da_lab.engine.lab import Lab
    from da_lab.versions.releases import engine_kwargs

    need = max(prompt_lens, default=0) + max_tokens
    # No cascade attention where the release has it (versions/releases.py).
    extra = engine_kwargs(engine_version())
    return Lab(model, num_blocks=blocks_for(prompt_lens, max_tokens, wave, runs_per_prompt,
                                            block_size),
               block_size=block_size, max_model_len=max(1024, need + block_size),
               record_rows=False,
               async_scheduling=async_scheduling, **extra)


def scheduling(lab) -> bool:
    """Whether the engine really schedules asynchronously (vLLM may overrule the request)."""
    from da_lab.engine.access import vllm_config

    return bool(vllm_config(lab.llm).scheduler_config.async_scheduling)


def run_batch(lab, runs: list[Run], max_tokens: int) -> dict[str, RunOut]:
    """Generate every run greedily until end of sequence (or max_tokens); {key: RunOut}."""
    from vllm import SamplingParams

    from da_lab.core.wire import extra_args
    from da_lab.engine.access import output_kind

    if lab.has_unfinished():
        raise RuntimeError("the eval needs an idle Lab (it has unfinished requests)")
    stamp = time.perf_counter_ns()
    by_id: dict[str, RunOut] = {}
    keys: dict[str, str] = {}
    for k, run in enumerate(runs):
        da_id = f"eval-{stamp}-{k}"
        extra = None
        if run.layout is not None:
            extra = extra_args(da_id, run.layout, run.script or None)
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens,
                                output_kind=output_kind("FINAL_ONLY"), extra_args=extra)
        lab.engine.add_request(da_id, {"prompt_token_ids": list(run.prompt_ids)}, params)
        by_id[da_id], keys[da_id] = RunOut(), run.key
    lab.session.new_warnings()       # what the eval's runs raise, from here on
    warnings: list[dict] = []
    for es in lab.steps_until_done():
        for r in es.requests:
            if r.req in by_id:
                by_id[r.req].rows.append(r)
        warnings += es.warnings
        for o in es.outputs:
            if o.finished and o.req in by_id:
                by_id[o.req].text = o.text
    for w in warnings:
        out = by_id.get(w.get("req")) if isinstance(w, dict) else None
        if out is not None and w.get("kind") not in out.flags:
            out.flags.append(w["kind"])
    return {keys[da_id]: out for da_id, out in by_id.items()}


def trapped_from(rows: list) -> list:
    """The decode steps (one query token) from the step that trapped the first tag on: that
    step already reads under the new directive."""
    out, trapped = [], False
    for r in rows:
        trapped = trapped or any(e.get("kind") == "tag_trapped" for e in r.events)
        if trapped and r.query_len == 1:
            out.append(r)
    return out


def fraction_after_tag(rows: list) -> list[float]:
    """blocks_read / blocks_total of each decode step after the first tag was trapped."""
    return [r.blocks_read / max(1, r.blocks_total) for r in trapped_from(rows)]


def kept_after_tag(rows: list) -> list[list[int]]:
    """Every logical block any decode step after the first tag read, as [start, stop) runs
    (a step that hid nothing read its whole row)."""
    seen: set[int] = set()
    for r in trapped_from(rows):
        kept = r.kept_logical if r.kept_logical is not None else range(r.blocks_total)
        seen.update(int(b) for b in kept)
    runs: list[list[int]] = []
    for b in sorted(seen):
        if runs and runs[-1][1] == b:
            runs[-1][1] = b + 1
        else:
            runs.append([b, b + 1])
    return runs
