"""The diagrams in a real browser: paint rates, step latency, bytes to the page, the first ten
minutes."""
