"""DA inside `vllm serve`: the API server's side of da_lab.

    edge.py       checks every DA request before the engine sees it (HTTP 400 when bad)
    endpoint.py   the `vllm.endpoint_plugins` entry point: edge, /da/* routes, /metrics
    metrics.py    the DA series on /metrics
    launch.py     `da-lab serve`: vLLM's server with the plugins and the lab's settings
    prompt.py     a DA prompt built through the server's own tokenizer (for the client)
    gate.py       checks on the request vLLM parsed, at every door (beam search, streams, batches)
    keys.py       --api-key over every route but a short open list (GET /da/routes says which)
    ids.py        the da_ids of the requests running now (a reused one is a 400)
    child.py      a `da-lab serve` process a test or benchmark starts and stops
    check.py      `python -m da_lab.serve.check`: a running server's DA, checked end to end

The `--extra-body` that puts a layout + director in every request of `vllm bench serve` is
da_lab/bench/served.py.

The worker's side (counting, per-request stats, the trace) is hook/service.py; the client is
da_lab/client.py. None of these modules imports vLLM: the plugin receives vLLM's objects.
"""
