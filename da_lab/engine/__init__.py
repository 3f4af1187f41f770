"""The driver side: the `Lab` that starts a real vLLM engine in this process and steps it, where
the engine keeps its parts (`access`), the physical KV map (`kvmap`), what vLLM put in the
model's slots (`introspect`), the environment every engine of the lab runs with (`env`), the
engines diagram 1's buttons start (`variants`), and the one way to run vLLM in a child process
(`child`). The models the lab builds locally live in `da_lab.models`."""
