"""The grouped read (issue 59) in the engine: decode rows over one prefix-cached corpus read
each shared kept block once per step. The plan is core/grouping.py's; the executors
grouped_exec.py's. Three small joints with the hook, each one call:

  install   runners/common.note_runner: wraps the attention backend's impl `forward` (CPU_ATTN,
            FlashAttention 3) once per class, and says why the grouped read can't run where it
            can't (another backend, FULL CUDA graphs)
  attach    the builder wrapper, once per step after the DA edit (Session.attach_grouped ->
            GroupedRead.attach): the step's kernel rows -> grouping.plan -> the rule's choice;
            a grouped step's plan and its tensors ride on the attention metadata object the
            builder returned, which every layer's forward receives
  forward   the wrapper: metadata without a plan -> the original forward; with one -> the
            executor fills every query token's output (KV writes stay with vLLM: they happen in
            do_kv_cache_update, through the slot mapping, before the forward)

Faults: a plan that does not match the metadata it rides on (a row no longer a decode row, or
reading another length than planned: it left its group), or any error inside the grouped path,
runs the plain path for that step with a `grouped_read_refused` warning, never a wrong result.

CUDA graphs: a group structure that changes from step to step can't be replayed from a captured
graph, so the grouped read runs where attention runs outside the graphs: eager, or
cudagraph_mode PIECEWISE (attention is a splitting op, run eagerly between the captured
pieces). With FULL graphs (vLLM's default FULL_AND_PIECEWISE replays decode steps whole) the
grouped read is unavailable and says so; a Lab or a bench mode that asks for it starts its
engine with PIECEWISE.
"""

from __future__ import annotations

import functools
import os
from collections import deque

import numpy as np
import torch

from da_lab.core import grouping
from da_lab.hook import faults
from da_lab.hook.grouped_exec import executor_for

ATTR = "_da_grouped"              # the attribute a grouped step's Tensors ride on
FLAGS = (None, "focus", "all")    # which rows may join a group: FOCUS/LOCAL rows, or every DA row
ENV = "DA_LAB_GROUPED_READ"       # the flag for engines a Lab does not start (serve, bench)
ENV_FIXED_US = "DA_LAB_GROUPED_FIXED_US"   # override the per-layer fixed cost (microseconds)
# DA_LAB_GROUPED_CHECK=1: every grouped layer also runs the plain path into a scratch output and
# the step's account keeps the largest difference (`check_max_abs`): a check, not a speed mode.
ENV_CHECK = "DA_LAB_GROUPED_CHECK"
# The GPU's fixed cost per layer, counted in the bytes HBM moves meanwhile. Designed as the
# grouped path's ~16 extra kernels at ~3 us each (48 us); measured on an H100 (2026-12-07,
# bench/results/bench-shared-grouped-64k-b16-b32-h100-2026-12-07.json): grouped steps took
# 24.0 ms (32 x 64k) and 29.4 ms (16 x 64k) more than plain FOCUS outside the attention
# kernels, over 32 layers 750-920 us a layer: the eager launches are host-bound, and PIECEWISE
# graphs run attention eagerly. With the measured cost the rule keeps the plain path at every
# shape measured (64 x 64k saves ~390 us of reads a layer on an H200), as it should.
FIXED_US_GPU = 750.0
HBM_BYTES_PER_US = {"H200": 4.8e6, "H100": 3.35e6}


def flag_from_env() -> str | None:
    v = os.environ.get(ENV) or None
    return v if v in FLAGS else None


def check_flag(flag) -> str | None:
    if flag not in FLAGS:
        raise ValueError(f"grouped_read must be one of {FLAGS}, not {flag!r}")
    return flag


# ---- install ---------------------------------------------------------------------------------
def install(runner, attn_groups) -> tuple[str | None, grouping.Cost | None]:
    """Wrap every attention backend's impl forward that an executor serves; (why the grouped
    read is unavailable or None, the layer's cost model)."""
    try:
        return _install(runner, attn_groups)
    except Exception as e:   # noqa: BLE001 - the grouped read is off, the engine starts
        return f"installing it failed: {type(e).__name__}: {e}", None


def _install(runner, attn_groups) -> tuple[str | None, grouping.Cost | None]:
    vc = runner.vllm_config
    mode = vc.compilation_config.cudagraph_mode
    why, cost = None, None
    for groups in attn_groups:
        for g in groups:
            name = g.backend.get_name()
            make = executor_for(name)
            if make is None:
                why = f"the {name} attention backend has no grouped executor"
                continue
            impl_cls = g.backend.get_impl_cls()
            if not getattr(impl_cls.forward, "_da_wrapped", False):
                impl_cls.forward = wrap_forward(impl_cls.forward, make())
            cost = cost or _cost(g.kv_cache_spec, vc)
    if mode is not None and mode.has_full_cudagraphs():
        why = (f"cudagraph_mode {mode.name} replays decode steps from FULL CUDA graphs, which "
               "can't follow a group structure that changes between steps; start the engine "
               "with cudagraph_mode PIECEWISE (or eager)")
    return why, cost


def _cost(spec, vc) -> grouping.Cost:
    elt = torch.empty((), dtype=spec.dtype).element_size()
    q_heads = vc.model_config.get_num_attention_heads(vc.parallel_config)
    fixed_us, per_us = 0.0, 0.0
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
        per_us = next((v for k, v in HBM_BYTES_PER_US.items() if k in gpu), 3.35e6)
        fixed_us = FIXED_US_GPU
    if os.environ.get(ENV_FIXED_US):
        fixed_us = float(os.environ[ENV_FIXED_US])
    return grouping.Cost.for_model(
        block_size=spec.block_size, kv_heads=spec.num_kv_heads, q_heads=q_heads,
        head_dim=spec.head_size, kv_elt=elt, out_elt=elt, launches=1, launch_us=fixed_us,
        bytes_per_us=per_us or 1.0)


# ---- attach: the plan, once per step --------------------------------------------------------
class Tensors:
    """One grouped step's plan as the executors read it (host lists; device tensors on CUDA)."""

    def __init__(self, plan: grouping.Plan, q_loc: np.ndarray, num_tokens: int,
                 block_size: int) -> None:
        self.plan, self.num_tokens, self.block_size = plan, num_tokens, block_size
        grouped = [p for p in plan.rows if p.groups]
        self.rows = [p.row for p in grouped]
        self.own_of = {p.row: (p.own, p.own_tokens) for p in grouped}
        self.group_blocks = [g.blocks for g in plan.groups]
        spans, q_idx, at = [], [], 0
        pos: dict[int, list[int]] = {}            # batch row -> its partials' query indices
        for g in plan.groups:
            spans.append((at, at + len(g.rows)))
            for r in g.rows:
                pos.setdefault(r, []).append(at)
                q_idx.append(int(q_loc[r]))
                at += 1
        self.group_spans, self.n_queries = spans, at
        self.q_idx = torch.tensor(q_idx, dtype=torch.long)
        self.rows_t = torch.tensor([int(q_loc[r]) for r in self.rows], dtype=torch.long)
        k = max((len(pos[r]) for r in self.rows), default=0)
        # slot s: each grouped row's s-th partial, or the empty one (index n_queries)
        self.slots = [torch.tensor([pos[r][s] if s < len(pos[r]) else at for r in self.rows],
                                   dtype=torch.long) for s in range(k)]
        self.max_q = max((len(g.rows) for g in plan.groups), default=0)
        self.max_k = max((len(b) for b in self.group_blocks), default=0) * block_size
        self.g_out = None                # the group pass's output (+ the empty partial), per step
        self.layers = 0                  # layers that ran grouped (the forward counts them)
        self.refused: str | None = None  # why this step fell back to the plain path
        self.step, self.req_ids = None, []          # the hook's Step and its DA requests
        self.on_refused = lambda why: None          # the session's warning

    def pack(self) -> torch.Tensor:
        """Every int the GPU needs, in one host buffer (to_device copies it once)."""
        w_own = max(len(b) for b, _ in self.own_of.values())
        w_g = max(len(b) for b in self.group_blocks)
        own = np.zeros((len(self.rows), w_own), np.int64)
        for i, r in enumerate(self.rows):
            own[i, : len(self.own_of[r][0])] = self.own_of[r][0]
        g_bt = np.zeros((len(self.group_blocks), w_g), np.int64)
        for i, b in enumerate(self.group_blocks):
            g_bt[i, : len(b)] = b
        parts = [np.asarray(self.rows), self.rows_t.numpy(),
                 np.asarray([t for _, t in self.own_of.values()]), own.ravel(), g_bt.ravel(),
                 np.asarray([len(b) * self.block_size for b in self.group_blocks]),
                 np.asarray([0] + [b for _, b in self.group_spans]), self.q_idx.numpy(),
                 *[s.numpy() for s in self.slots]]
        self._shapes = [len(p) for p in parts] + [w_own, w_g]
        return torch.from_numpy(np.concatenate(parts).astype(np.int64))

    def to_device(self, meta) -> None:
        """The device tensors the FlashExecutor reads, once for every layer of the step: one
        pinned host buffer, one copy queued behind the step's work (no sync). Then views of it,
        and the own pass's tables: the builder's (the kernel rows), each grouped row's cut to
        its own blocks."""
        dev = meta.block_table.device
        self.views(self.pack().pin_memory().to(dev, non_blocking=True), meta)

    def views(self, buf: torch.Tensor, meta) -> None:
        """The executor's tensors from the packed buffer `buf` (wherever it lies)."""
        *sizes, w_own, w_g = self._shapes
        cuts = np.cumsum([0, *sizes])
        p = [buf[cuts[i]: cuts[i + 1]] for i in range(len(sizes))]
        rows, self.rows_t, own_tok, own, g_bt, g_seq, cu_q, self.q_idx_dev = p[:8]
        self.slots = p[8:]
        n = len(meta.seq_lens)
        self.own_bt = meta.block_table[:n].clone()
        self.own_bt[rows, :w_own] = own.view(len(self.rows), w_own).to(self.own_bt.dtype)
        self.own_seq = meta.seq_lens.clone()
        self.own_seq[rows] = own_tok.to(self.own_seq.dtype)
        self.g_bt = g_bt.view(len(self.group_blocks), w_g).to(torch.int32)
        self.g_seq, self.cu_q = g_seq.to(torch.int32), cu_q.to(torch.int32)

    def summary(self) -> dict:
        return dict(self.plan.to_json(), layers=self.layers, refused=self.refused)


def kernel_rows(step, rows_of: str) -> list[grouping.Row]:
    """The step's DA rows as the kernel reads them (the staged rows, the kept blocks): from the
    step's plan (hook/plan.py), which nobody edits."""
    out = []
    for p in step.plan.requests:
        n = -(-p.seq_len // p.block_size)
        staged = np.asarray(step.staged(p.row))[:n]
        if len(staged) < n:
            raise ValueError(f"batch row {p.row}: the runner's row has {len(staged)} of its "
                             f"{n} blocks")
        out.append(grouping.Row(p.row, staged[p.kept] if p.masked else staged,
                                int(p.attn_seq_len), int(p.query_len),
                                rows_of == "all" or p.masked))
    return out


def stale(plan: grouping.Plan, cm) -> str | None:
    """Why `plan` no longer describes the metadata `cm` (a row left its group: not a decode
    row any more, or reading another length), or None."""
    q = cm.query_start_loc_cpu.numpy()
    seq = cm.seq_lens.numpy() if cm.seq_lens.device.type == "cpu" else (
        None if cm.seq_lens_cpu_upper_bound is None else cm.seq_lens_cpu_upper_bound.numpy())
    for p in plan.rows:
        if not p.groups:
            continue
        if p.row >= cm.num_reqs or q[p.row + 1] - q[p.row] != 1:
            return f"batch row {p.row} is not a decode row of this step's metadata"
        if seq is not None and int(seq[p.row]) != p.seq_len:
            return (f"batch row {p.row} reads {int(seq[p.row])} tokens, the plan "
                    f"{p.seq_len}")
    return None


def attach(meta, cm, step, rows_of: str, cost: grouping.Cost,
           last: grouping.Plan | None = None) -> tuple[Tensors | None, grouping.Plan]:
    """The step's plan (the `last` step's carried on when only the rows' tails grew: no sort
    over every block each step) and, if the rule groups it, its Tensors set on the metadata
    object `meta`. Raises on a fault: the caller refuses the step's grouping and warns."""
    faults.check("grouping", step.plan.da_ids)
    rows = kernel_rows(step, rows_of)
    block_size = step.plan.requests[0].block_size
    plan = last is not None and grouping.extend(last, rows, cost) or \
        grouping.plan(rows, block_size, cost)
    if not plan.grouped:
        step.grouping = plan.to_json()
        return None, plan
    why = stale(plan, cm)
    if why:
        raise RuntimeError(f"the plan does not match the metadata: {why}")
    t = Tensors(plan, cm.query_start_loc_cpu.numpy(), int(cm.num_actual_tokens), block_size)
    if meta.block_table.device.type == "cuda":
        t.to_device(meta)
    step.grouping = t.summary()
    t.step, t.req_ids = step, step.plan.da_ids
    setattr(meta, ATTR, t)
    return t, plan


# ---- forward ---------------------------------------------------------------------------------
def _note_diff(t: Tensors, output, ref) -> None:
    """The largest |grouped - plain| over the grouped rows' outputs, kept in the step's account."""
    d = float((output.index_select(0, t.rows_t).float()
               - ref.index_select(0, t.rows_t).float()).abs().max())
    acc = t.step.grouping
    acc["check_max_abs"] = max(acc.get("check_max_abs", 0.0), d)
    acc["check_layers"] = acc.get("check_layers", 0) + 1


def wrap_forward(orig, executor):
    """The backend impl's forward: a grouped step's layers through `executor`, every other call
    to `orig`. Any error in the grouped path: that step runs plain from this layer on."""
    usable: dict[int, str | None] = {}

    @functools.wraps(orig)
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, *args,
                **kwargs):
        t = getattr(attn_metadata, ATTR, None) if attn_metadata is not None else None
        if t is None or t.refused is not None:
            return orig(self, layer, query, key, value, kv_cache, attn_metadata, output,
                        *args, **kwargs)
        try:
            why = usable.get(id(self), False)
            if why is False:                 # once per layer: its impl's settings don't change
                why = usable[id(self)] = executor.usable(self)
            if why is None and attn_metadata.num_actual_tokens != t.num_tokens:
                why = "the metadata's token count differs from the plan's"
            if why is not None:
                raise RuntimeError(f"the grouped read can't serve this layer: {why}")
            executor.run(self, layer, query, kv_cache, attn_metadata, output, t)
            t.layers += 1
            t.step.grouping["layers"] = t.layers
            if os.environ.get(ENV_CHECK) == "1":
                ref = torch.empty_like(output)
                orig(self, layer, query, key, value, kv_cache, attn_metadata, ref, *args, **kwargs)
                _note_diff(t, output, ref)
            return output
        except Exception as e:   # noqa: BLE001 - the plain path is always right
            t.refused = f"{type(e).__name__}: {e}"
            t.step.grouping["refused"] = t.refused
            t.on_refused(t.refused)
            return orig(self, layer, query, key, value, kv_cache, attn_metadata, output,
                        *args, **kwargs)

    forward._da_wrapped = True
    return forward


# ---- the grouped read's state in one engine (Session.grouped) ---------------------------------
class GroupedRead:
    """Which rows may join a group (`flag`, None: off), why this engine can't run it
    (`unavailable`, None: it can), its cost model, the last step's plan (carried on while it
    holds) and the recent steps' accounts (`history`)."""

    def __init__(self) -> None:
        self.flag = flag_from_env()
        self.unavailable: str | None = "no engine has started"
        self.cost = None
        self.plan = None
        self.history: deque[dict] = deque(maxlen=1024)

    def note(self, unavailable: str | None, cost) -> None:
        """What the grouped read can do in this engine (runners/common.note_runner)."""
        self.unavailable, self.cost, self.plan = unavailable, cost, None

    def attach(self, meta, cm, step, book):
        """The step's plan on `meta` (module docstring); warnings go to `book`."""
        def refused(why: str) -> None:
            book.warn({"kind": "grouped_read_refused", "req": None, "step": book.step_index,
                       "text": "", "detail": f"the step runs the plain path: {why}"})

        if self.unavailable:                      # said once per engine, at its first step
            last = self.history[-1] if self.history else {}
            if last.get("refused") != self.unavailable:
                refused(f"unavailable in this engine: {self.unavailable}")
            self.history.append({"grouped": False, "refused": self.unavailable})
            return meta
        try:
            t, self.plan = attach(meta, cm, step, self.flag, self.cost, self.plan)
            if t is not None:
                t.on_refused = refused
        except Exception as e:   # noqa: BLE001 - the plain path is always right
            self.plan = None
            step.grouping = {"grouped": False, "refused": f"{type(e).__name__}: {e}"}
            refused(step.grouping["refused"])
        if step.grouping is not None:
            self.history.append(step.grouping)
        return meta
