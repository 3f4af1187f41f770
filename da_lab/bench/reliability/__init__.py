"""Reliability: fuzzed tags, concurrency, preemption, lifecycles, the server's hostile cases."""
