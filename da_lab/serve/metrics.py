"""DA series on the server's /metrics, beside vLLM's own.

vLLM's API server exposes prometheus_client's default registry at /metrics (one API server; with
--api-server-count > 1 it switches to a multiprocess registry that these series don't reach).
The numbers are counted where the hook runs, in the worker process (hook/counters.py); the API
server holds the last copy, refreshed from rank 0 right before every scrape (endpoint.py's
`RefreshOnScrape`), so a scrape always sees the engine's state as of that moment and nothing
polls the engine in between. The edge's own refusals (HTTP 400s) are counted here.

    da_lab:requests_total                  DA requests the hook took on
    da_lab:requests_running                DA requests the hook holds state for now
    da_lab:requests_rejected_total{reason} DA requests refused at the edge (HTTP 400)
    da_lab:steps_total                     engine steps with at least one DA request
    da_lab:blocks_read_total               KV blocks the kernel read, per DA request per step
    da_lab:blocks_in_row_total             KV blocks in those requests' rows (read / in_row:
                                           the fraction of the cache DA let attention read)
    da_lab:decode_kv_positions_read_total  KV positions the kernel read during decode steps
    da_lab:decode_kv_positions_full_total  the positions full attention would have read (read /
                                           full: the paper's decoding attention cost)
    da_lab:mode_switches_total{mode}       directive changes, by the mode switched to
    da_lab:malformed_tags_total{kind}      malformed_tag, unknown_chunk
    da_lab:warnings_total{kind}            da_refused, aborted_mid_tag, recompute_under_mask
    da_lab:hook_step_seconds               histogram: the hook's decision time per step
"""

from __future__ import annotations

from da_lab.hook.counters import Counters


class DACollector:
    """A prometheus_client collector over the last counters fetched from the engine."""

    def __init__(self, model_name: str, rejected: dict) -> None:
        self.model_name = model_name
        self.rejected = rejected          # the edge's reason -> count (live dict)
        self.snapshot = dict(Counters().snapshot(), live_requests=0)
        self.refreshed = 0                # scrapes that reached the engine

    def update(self, snapshot: dict) -> None:
        self.snapshot = snapshot
        self.refreshed += 1

    def collect(self):
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        s, m = self.snapshot, [self.model_name]

        def counter(name, doc, value, label=None, key=None):
            fam = CounterMetricFamily(f"da_lab:{name}", doc,
                                      labels=["model_name"] + ([label] if label else []))
            if label:
                for k, v in sorted(value.items()):
                    fam.add_metric(m + [k], v)
            else:
                fam.add_metric(m, value)
            return fam

        yield counter("requests", "DA requests the hook took on", s["requests"])
        gauge = GaugeMetricFamily("da_lab:requests_running",
                                  "DA requests the hook holds state for", labels=["model_name"])
        gauge.add_metric(m, s.get("live_requests", 0))
        yield gauge
        yield counter("requests_rejected", "DA requests refused at the edge (HTTP 400)",
                      dict(self.rejected), "reason")
        yield counter("steps", "engine steps with at least one DA request", s["steps"])
        yield counter("blocks_read", "KV blocks the kernel read, per DA request per step",
                      s["blocks_read"])
        yield counter("blocks_in_row", "KV blocks in the rows of those requests",
                      s["blocks_total"])
        # The paper's decoding attention cost (Ho et al. 2026) is read_total / full_total.
        yield counter("decode_kv_positions_read", "KV positions the kernel read during decode",
                      s.get("decode_kv_read", 0))
        yield counter("decode_kv_positions_full",
                      "KV positions full attention would have read during decode",
                      s.get("decode_kv_full", 0))
        yield counter("mode_switches", "directive changes by the mode switched to",
                      s["mode_switches"], "mode")
        yield counter("malformed_tags", "tags the hook could not use", s["malformed"], "kind")
        yield counter("warnings", "DA warnings by kind", s["warnings"], "kind")
        # The worker's bucket counts are cumulative already (each counts steps <= its bound).
        buckets = [(repr(ub), n) for ub, n in zip(s["hook_buckets_le"], s["hook_buckets"],
                                                  strict=True)] + [("+Inf", s["steps"])]
        hist = HistogramMetricFamily("da_lab:hook_step_seconds",
                                     "the DA hook's decision time per engine step",
                                     labels=["model_name"])
        hist.add_metric(m, buckets, s["hook_seconds_sum"])
        yield hist


def register(collector: DACollector) -> None:
    """Put `collector` in prometheus_client's default registry, in place of an earlier
    DACollector (an app made again in the same process). The registry is the one record of
    what is registered: it is scanned the way vLLM's own unregister_vllm_metrics scans it."""
    from prometheus_client import REGISTRY

    for old in list(getattr(REGISTRY, "_collector_to_names", {})):
        if isinstance(old, DACollector):
            REGISTRY.unregister(old)
    REGISTRY.register(collector)
