"""DA inside `vllm serve`: the API server's side of da_lab.

    edge.py       checks every DA request before the engine sees it (HTTP 400 when bad)
    endpoint.py   the `vllm.endpoint_plugins` entry point: edge, /da/* routes, /metrics
    metrics.py    the DA series on /metrics
    launch.py     `da-lab serve`: vLLM's server with the plugins and the lab's settings
    gate.py       checks on the request vLLM parsed, at every door (beam search, streams, batches)
    keys.py       --api-key over every route but a short open list (GET /da/routes says which)
    ids.py        the da_ids of the requests running now (a reused one is a 400)
    server_process.py  a `da-lab serve` process a test or benchmark starts and stops

The `--extra-body` that puts a layout + director in every request of `vllm bench serve` is
da_lab/bench/served.py. The worker's side (counting, per-request stats, the trace) is
hook/service.py; the client side (DAClient, prompts through the server's tokenizer, the
end-to-end check) is da_lab/client/, which this package never imports. None of these
modules imports vLLM: the plugin receives vLLM's objects.
"""
