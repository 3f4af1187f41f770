"""Teacher forcing on a live Lab: replay a token stream through the engine and read the
model's own greedy choice at every position.

The director writes every output token of the stream (so the tags in it, and with them the
hook's mask history, are those of the run that produced it), and the request asks for
logprobs: vLLM computes them from the logits before the hook overrides the sampled token, so
the top-1 token of each position is what the model would have chosen there. Comparing two
engines (compiled vs eager) this way covers every position, not only those before their first
divergence."""

from __future__ import annotations

from da_lab.core.layout import DAPrompt


def top1(logprobs: dict) -> int:
    """The rank-1 token of one position's logprobs ({token id: Logprob})."""
    return min(logprobs.items(), key=lambda kv: kv[1].rank)[0]


def forced_argmax(lab, prompt: DAPrompt | list[int], tokens: list[int], *,
                  request_id: str) -> list[int]:
    """The model's greedy token at each of `tokens`' positions when `prompt` is followed by
    exactly `tokens` (all forced). Runs the engine until this request is done; any other
    request in the Lab must be finished first (their steps would not be recorded)."""
    return [top1(lp) for lp in forced_logprobs(lab, prompt, tokens, request_id=request_id)]


def forced_logprobs(lab, prompt: DAPrompt | list[int], tokens: list[int], *,
                    request_id: str, k: int = 1) -> list[dict]:
    """Each position's top-`k` logprobs ({token id: Logprob}, vLLM's) when `prompt` is
    followed by exactly `tokens` (all forced), as `forced_argmax` runs it: the model's whole
    distribution there, for the logprob verdict (checks/logprob_verdict.py)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from da_lab.core.wire import extra_args

    if lab.has_unfinished():
        raise RuntimeError("forced_argmax needs an idle Lab: finish its requests first")
    if not tokens:
        return []
    extra = extra_args(request_id, prompt.layout if isinstance(prompt, DAPrompt) else None,
                       [[0, [int(t) for t in tokens]]])
    ids = list(prompt.token_ids) if isinstance(prompt, DAPrompt) else list(prompt)
    params = SamplingParams(temperature=0.0, max_tokens=len(tokens), ignore_eos=True,
                            logprobs=k, output_kind=RequestOutputKind.DELTA, extra_args=extra)
    lab.engine.add_request(request_id, {"prompt_token_ids": ids}, params)
    got: list[dict] = []
    written: list[int] = []
    for es in lab.steps_until_done():    # not the Lab's records: nothing is recorded
        for o in es.outputs:
            if o.req == request_id:
                written += list(o.token_ids)
                got += list(o.logprobs or [])
    if written != [int(t) for t in tokens] or len(got) != len(tokens):
        raise RuntimeError(f"teacher forcing: the engine wrote {len(written)} tokens with "
                           f"{len(got)} logprobs, not the {len(tokens)} forced ones")
    return got
