"""The core of DA, importing neither torch nor vLLM: the tag grammar and its streaming state
machine (`tags`), a DA prompt's layout in blocks (`layout`), the pure decision of which blocks a
step reads (`mask`), and the typed step record that carries each step to traces and diagrams
(`record`)."""
