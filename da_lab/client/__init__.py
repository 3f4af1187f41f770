"""The client side of `da-lab serve` (any vLLM server with da_lab's plugins), no vLLM needed:

    daclient.py   `DAClient`: DA requests over the OpenAI API, their stats, `da-lab ask`
    transport.py  HTTP with a time limit per call and a size limit per answer; ServerError
    prompt.py     a DA prompt built with the server's own tokenizer and chat template
    check.py      `python -m da_lab.client.check --server URL`: a running server's DA, end to end
"""

from da_lab.client.daclient import DAClient, Reply, cmd_ask, server_root
from da_lab.client.transport import ServerError

__all__ = ["DAClient", "Reply", "ServerError", "cmd_ask", "server_root"]
