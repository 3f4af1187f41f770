"""The bench child's measuring: per context, prefill the largest batch once, then per batch
time `repeats` windows of `decode_steps` pure decode steps (their median and spread) and
profile a few more steps. Mixed into worker.Child, which owns the engine."""

from __future__ import annotations

import sys
import time
import traceback

from da_lab.bench.plan import (
    GROUPED,
    base_mode,
    bench_layout,
    focus_fraction,
    kept_fraction,
    kept_prompt_len,
)
from da_lab.bench.report import spread
from da_lab.bench.shared import (
    blocks_needed,
    blocks_needed_pairs,
    corpus_len,
    focus_tag,
    grouped_account,
    kept_corpus_len,
    pair_blocks,
    pair_corpus,
    shared_layout,
)
from da_lab.core.cost import cost, step_positions


def blocks_of(n_tokens: int, bs: int) -> int:
    return -(-n_tokens // bs)


class Measuring:
    """Needs from the host class: spec, doc, engine, driver, plugin, session, recorder, counts,
    num_blocks, tok_vocab, tag_ids, step(), hook_log(), left(), flush(), profile()."""

    @property
    def bs(self) -> int:
        """The DA layout's block size: the global layers' (a hybrid model's sliding or GDN
        groups may run other sizes; plan.block_sizes)."""
        return self.spec.get("layout_block_size") or self.spec["block_size"]

    def prompts(self, context: int, batch: int, length: int, layout) -> list[list[int]]:
        """Random prompts, the same for every mode of a run: distinct, or with --shared one
        corpus (cut to `length` less the question) and a question of each request's own."""
        import numpy as np

        hi = min(self.tok_vocab, self.vocab_size)
        q = self.spec.get("shared", 0)
        if q:
            corpus = np.random.default_rng([self.spec["seed"], context, 1 << 30]).integers(
                3, hi, size=corpus_len(layout)).tolist()
            cut = ((lambda i: pair_corpus(layout, corpus, i))       # each request its own pair
                   if self.spec["mode"] == "stock_kept_pairs" else lambda i: corpus[:length - q])
            return [cut(i) + np.random.default_rng([self.spec["seed"], context, i]).integers(
                3, hi, size=q).tolist() for i in range(batch)]
        out = []
        for i in range(batch):
            rng = np.random.default_rng([self.spec["seed"], context, i])
            out.append(rng.integers(3, hi, size=context).tolist()[:length])
        return out

    def _row(self, context: int, batch: int, **kw) -> dict:
        row = {"model": self.spec["model"], "context": context, "batch": batch,
               "mode": self.spec["mode"], "kept_block_fraction": None, "decode_tok_s": None,
               "attn_ms_per_step": None, "ideal_speedup": None, "block_size": self.bs,
               "kv_bytes_per_token": self.doc.get("kv_bytes_per_token"),
               "weight_bytes_read": self.doc.get("weight_bytes_read")}
        row.update(kw)
        return row

    def _emit(self, row: dict) -> None:
        self.doc["rows"].append(row)
        self.flush()
        what = row.get("error") or row.get("skipped") or (
            f"{row['decode_tok_s']} tok/s, attn {row['attn_ms_per_step']} ms/step, "
            f"kept {row['kept_block_fraction']}")
        print(f"[bench child] {row['model']} {row['mode']} ctx {row['context']} "
              f"batch {row['batch']}: {what}", file=sys.stderr, flush=True)

    def tag_of(self, mode: str, i: int) -> list[int]:
        """Request i's tag token ids (--shared: each FOCUS request names its own chunks)."""
        if base_mode(mode) == "focus" and self.spec.get("shared"):
            return self.tok.encode(focus_tag(i), add_special_tokens=False).ids
        return self.tag_ids.get(mode, [])

    def _fitting(self, context: int, batches: list[int]) -> tuple[object, int, list[int]]:
        """(layout, prompt length, the batches whose KV fits); rows for the rest emitted."""
        s, mode, q = self.spec, self.spec["mode"], self.spec.get("shared", 0)
        tag_len = len(self.tag_ids["focus"])      # every mode decodes from the same position
        try:
            if q:
                layout = shared_layout(context, self.bs, q)
            else:
                layout = bench_layout(context, self.bs,
                                      fraction=focus_fraction(mode, s["focus_fraction"]),
                                      spans=bool(s.get("spans")),
                                      response_tokens=tag_len + s["warmup_steps"]
                                      + s["decode_steps"] * s.get("repeats", 1) // 2)
        except ValueError as e:
            for b in batches:
                self._emit(self._row(context, b, skipped=str(e)))
            return None, 0, []
        if q and mode == "stock_kept_pairs":     # each request its own cut of the corpus
            bs = layout.block_size
            length = max(len(pair_blocks(layout, i)) for i in range(max(batches))) * bs + q
            need = {b: blocks_needed_pairs(layout, b, s["max_model_len"]) for b in batches}
        elif q:     # the corpus is held once (prefix cache), each request's own part apart
            length = kept_corpus_len(layout) + q if mode == "stock_kept" else layout.prompt_len
            need = {b: blocks_needed(layout, b, s["max_model_len"]) for b in batches}
        else:
            length = kept_prompt_len(layout) if mode == "stock_kept" else context
            need = {b: b * (blocks_of(s["max_model_len"], self.bs) + s.get("local_blocks", 0))
                    for b in batches}
        fits = [b for b in batches if need[b] <= self.num_blocks]
        for b in batches:
            if b not in fits:
                self._emit(self._row(context, b, skipped=(
                    f"does not fit: {need[b]} blocks needed, the KV cache has "
                    f"{self.num_blocks}")))
        if fits and self.left() < 10:
            for b in fits:
                self._emit(self._row(context, b, error="--max-seconds reached before this row"))
            return layout, length, []
        return layout, length, fits

    def _add_requests(self, context: int, batch: int, layout, length: int) -> list[str]:
        from vllm import SamplingParams

        from da_lab.core.wire import extra_args
        from da_lab.engine.access import output_kind

        mode, q = self.spec["mode"], self.spec.get("shared", 0)
        self.counts, self.cached, self.prompt_lens = {}, {}, {}
        da_ids = []
        prompts = self.prompts(context, batch, length, layout)
        self.warm_s = 0.0           # stock_kept_pairs: no one prefix to warm
        if q and mode != "stock_kept_pairs":
            self.warm_s = self.warm_prefix(f"warm-{context}", prompts[0][:-q])
        for i, ids in enumerate(prompts):
            max_tokens = self.spec["max_model_len"] - len(ids)
            da_id = f"{mode}-{context}-{i}"
            tag = self.tag_of(mode, i)
            extra = None
            if self.plugin:
                extra = extra_args(da_id, layout, [[0, list(tag)]] if tag else None)
            params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                                    detokenize=False, output_kind=output_kind("DELTA"),
                                    extra_args=extra)
            self.engine.add_request(da_id, {"prompt_token_ids": ids}, params)
            if self.recorder is not None:
                self.recorder.added.append({"req": da_id, "prompt_len": len(ids),
                                            "max_tokens": max_tokens,
                                            "layout": layout.to_dict(), "tags": []})
            self.counts[da_id] = 0
            self.prompt_lens[da_id] = len(ids)
            da_ids.append(da_id)
        return da_ids

    def warm_prefix(self, req_id: str, corpus: list[int]) -> float:
        """Prefill the corpus alone (no DA: one token, then done) so that it sits in the prefix
        cache before the batch arrives, as a corpus many readers ask about would; seconds."""
        from vllm import SamplingParams

        t0 = time.perf_counter()
        self.engine.add_request(req_id, {"prompt_token_ids": corpus},
                                SamplingParams(temperature=0.0, max_tokens=1, detokenize=False))
        while self.engine.has_unfinished_requests():
            self.step()
            if self.left() < 0:
                raise TimeoutError("--max-seconds reached while warming the shared corpus")
        return time.perf_counter() - t0

    def measure_context(self, context: int) -> None:
        s = self.spec
        layout, length, fits = self._fitting(context, sorted(s["batches"], reverse=True))
        if not fits:
            return
        da_ids = self._add_requests(context, fits[0], layout, length)
        warm = s["warmup_steps"]
        tag_len = max(len(self.tag_of("focus", i)) for i in range(len(da_ids)))
        t_prefill, n_prefill = time.perf_counter(), 0
        try:
            while min(self.counts.values()) < tag_len + warm:
                self.step()
                n_prefill += 1
                if self.left() < 0:
                    raise TimeoutError("--max-seconds reached during prefill")
            prefill_s = time.perf_counter() - t_prefill
            for k, b in enumerate(fits):
                if self.left() < 0:
                    self._emit(self._row(context, b, error="--max-seconds reached"))
                    continue
                if k:
                    gone = da_ids[b:]
                    self.engine.abort_request(gone)
                    for r in gone:
                        self.counts.pop(r, None)
                    da_ids = da_ids[:b]
                    for _ in range(warm):
                        self.step()
                row = self.measure(context, b, layout, length, da_ids)
                row.update(prompt_len=length, prefill_s=round(prefill_s, 2) if not k else None,
                           prefill_steps=n_prefill if not k else None)
                if s.get("shared"):
                    row.update(shared_prefix=s["shared"], corpus_tokens=length - s["shared"],
                               warm_s=round(self.warm_s, 2) if not k else None,
                               # the prefix cache's hit per request: the corpus, not recomputed
                               prefix_cached_tokens_min=min(
                                   (self.cached.get(r, 0) for r in da_ids), default=0))
                self._emit(row)
        except Exception as e:   # noqa: BLE001 - this context's rows get the error; go on
            done = {(r["context"], r["batch"]) for r in self.doc["rows"]}
            for b in fits:
                if (context, b) not in done:
                    self._emit(self._row(context, b, error=f"{type(e).__name__}: {e}",
                                         traceback=traceback.format_exc()[-2000:]))
        finally:
            self._drain(da_ids)

    def _drain(self, da_ids: list[str]) -> None:
        """Abort this context's requests and step until the engine is empty."""
        live = [r for r in da_ids if r in self.counts]
        if live:
            self.engine.abort_request(live)
        for _ in range(1000):
            if not self.engine.has_unfinished_requests():
                break
            self.driver.step()          # not recorded, not counted
            if self.recorder is not None:
                self.recorder.skipped_steps()
        if self.plugin:
            for r in da_ids:
                self.session.forget_script(r)
            self.hook_log()

    def timed_windows(self, steps: int, repeats: int) -> tuple[list[float], int, float]:
        """`repeats` back-to-back windows of `steps` engine steps: (tok/s of each window,
        tokens, seconds in all). Window boundaries are kept in the document for the parent's
        overlap check."""
        rates, toks_all, secs = [], 0, 0.0
        self.doc.setdefault("t_first_window", time.time())
        for _ in range(repeats):
            toks = 0
            t0 = time.perf_counter()
            for _ in range(steps):
                toks += self.step()
            dt = time.perf_counter() - t0
            rates.append(toks / dt)
            toks_all, secs = toks_all + toks, secs + dt
        self.doc["t_last_window_end"] = time.time()
        return rates, toks_all, secs

    def measure(self, context, batch, layout, length, da_ids) -> dict:
        s = self.spec
        mode, bs, steps = s["mode"], self.bs, s["decode_steps"]
        repeats = int(s.get("repeats", 1))
        self.hook_log()
        before = {r: self.counts[r] for r in da_ids}
        rec_s = self.recorder.seconds if self.recorder is not None else None
        rates, toks, dt = self.timed_windows(steps, repeats)
        log = self.hook_log()
        after = {r: self.counts[r] for r in da_ids}
        # Blocks a stock engine reads: every block of each sequence (mean of window ends).
        n_all = layout.prompt_len if s.get("shared") else context     # + the question
        full = sum(blocks_of(n_all + before[r], bs) + blocks_of(n_all + after[r], bs)
                   for r in da_ids) / 2
        mid_seq = n_all + sum(before[r] + after[r] for r in da_ids) / (2 * len(da_ids))
        sp = spread(rates)
        row = self._row(context, batch, decode_tok_s=sp["median"], decode_tok_s_spread=sp,
                        decode_tok_s_repeats=[round(x, 2) for x in rates], repeats=repeats,
                        steps=steps, tokens=toks, seconds=round(dt, 4),
                        step_ms=round(dt / (steps * repeats) * 1e3, 3),
                        kv_blocks_full_per_step=full, seq_len_mid=round(mid_seq, 1))
        if self.plugin:
            self._hook_fractions(row, log, layout, da_ids, mid_seq)
            if rec_s is not None:
                row["recording_ms_per_step"] = round(
                    (self.recorder.seconds - rec_s) / max(1, steps * repeats) * 1e3, 3)
        else:
            n = self.prompt_lens          # stock reads all it has: its own prompt + outputs
            read = sum(blocks_of(n[r] + before[r], bs) + blocks_of(n[r] + after[r], bs)
                       for r in da_ids) / 2
            row.update(kept_block_fraction=round(read / full, 4), kept_source="seq_len",
                       kv_blocks_read_per_step=read,
                       # its cost is its length over the full context's
                       decoding_attention_cost=round(
                           sum(n[r] + before[r] + n[r] + after[r] for r in da_ids)
                           / sum(n_all + before[r] + n_all + after[r] for r in da_ids), 4))
            if base_mode(mode) == "stock_kept":
                tags = [focus_tag(i if mode == "stock_kept_pairs" else 0) if s.get("shared")
                        else None for i in range(len(da_ids))]
                row["kept_block_fraction_expected"] = round(sum(kept_fraction(
                    layout, "focus", round(mid_seq), t) for t in tags) / len(tags), 4)
        if row.get("kv_blocks_read_per_step") is not None and row.get("kv_bytes_per_token"):
            row["kv_bytes_read_per_step"] = round(
                row["kv_blocks_read_per_step"] * bs * row["kv_bytes_per_token"])
        if s["profile_steps"] > 0:
            row.update(self.profile(s["profile_steps"]))
        return row

    def _hook_fractions(self, row: dict, log: list[dict], layout, da_ids, mid_seq) -> None:
        """The kept fraction the kernel was given, read back from the hook's step records."""
        mode = base_mode(self.spec["mode"])
        tags = [focus_tag(i) if mode == "focus" and self.spec.get("shared") else None
                for i in range(len(da_ids))]           # --shared: each request its own pair
        row["kept_block_fraction_expected"] = round(sum(
            kept_fraction(layout, mode, round(mid_seq), t) for t in tags) / len(tags), 4)
        read = total = n_steps = kv_read = kv_full = 0
        hook_us = []
        mine = set(da_ids)
        for st in log:
            rs = [r for r in st.requests if r.req in mine and r.query_len == 1]
            if not rs:
                continue
            n_steps += 1
            read += sum(r.blocks_read for r in rs)
            total += sum(r.blocks_total for r in rs)
            r_, f_ = step_positions(rs)
            kv_read, kv_full = kv_read + r_, kv_full + f_
            hook_us.append(st.hook_us)
        if n_steps:
            # The paper's decoding attention cost: KV positions read / full attention's.
            row["decoding_attention_cost"] = cost(kv_read, kv_full)
            row.update(kept_block_fraction=round(read / total, 4), kept_source="hook",
                       kv_blocks_read_per_step=read / n_steps,
                       kv_blocks_full_per_step=total / n_steps, hook_steps=n_steps,
                       hook_us_per_step=round(sum(hook_us) / n_steps, 1))
            if self.spec["mode"] in GROUPED:
                # The kernel rows name kv_blocks_read_per_step blocks; the grouped path reads
                # each shared one once (the plans', hook/grouped.py): what attention reads.
                acc = grouped_account(log)
                row.update(acc, grouped_read=GROUPED[self.spec["mode"]],
                           kv_blocks_kernel_rows_per_step=read / n_steps)
                if acc.get("planned_steps"):
                    row["kv_blocks_read_per_step"] = acc["kv_blocks_grouped_per_step"]
        else:
            row["note"] = "the hook recorded no decode step for these requests"
