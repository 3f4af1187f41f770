"""DA inside `vllm serve`: the API server's side of da_lab.

    edge.py       checks every DA request before the engine sees it (HTTP 400 when bad)
    endpoint.py   the `vllm.endpoint_plugins` entry point: edge, /da/* routes, /metrics
    metrics.py    the DA series on /metrics
    launch.py     `da-lab serve`: vLLM's server with the plugins and the lab's settings
    prompt.py     a DA prompt built through the server's own tokenizer (for the client)
    bench.py      the `--extra-body` that puts a layout + director in every request of
                  `vllm bench serve`

The worker's side (counting, per-request stats, the trace) is hook/service.py; the client is
da_lab/client.py. None of these modules imports vLLM: the plugin receives vLLM's objects.
"""
