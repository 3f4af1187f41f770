"""The client side of `da-lab serve` (any vLLM server with da_lab's plugins), no vLLM needed:

    daclient.py   `DAClient`: DA requests over the OpenAI API, their stats, `da-lab ask`
    prompt.py     a DA prompt built with the server's own tokenizer and chat template
    check.py      `python -m da_lab.client.check --server URL`: a running server's DA, end to end
"""

from da_lab.client.daclient import DAClient, Reply, cmd_ask, server_root

__all__ = ["DAClient", "Reply", "cmd_ask", "server_root"]
