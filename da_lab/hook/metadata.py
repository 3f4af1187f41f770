"""The DA edit itself, shared by both model runners: the backend's `MetadataBuilder.build`
receives a CommonAttentionMetadata whose *read* path (block_table_tensor, seq_lens, max_seq_len
and their CPU copies) covers only the kept blocks. Slot mapping (the KV *writes*) is untouched.

Every entry that builds attention metadata, and what happens there:
  build                          the DA edit (both runners, eager and CUDA graphs)
  build_for_cudagraph_capture    capture runs on dummy rows with no DA request: nothing to edit;
                                 the captured graph reads the persistent buffers we edit in place
  update_block_table             used only to share metadata across several KV-cache groups,
                                 which the hook refuses at start (check_groups); raises if reached
  build_for_drafting             speculative decoding, refused at start (check_specs)
  cascade (common_prefix_len>0)  refused in build: one kernel row can't express it

CPU vs GPU: on the CPU runner the committed row *is* the staged row (one array), so the edit is
copy-on-write. On CUDA, FULL CUDA graphs replay kernels that read the block table
and seq_lens at fixed addresses — new tensors would be silently ignored — so the edit is made
in place, after slot mapping was computed from the committed rows, and seq_lens are restored once
the forward is queued (the V2 sampler reads them; the next step rebuilds the block table).
"""

from __future__ import annotations

import copy
import functools
import time

import numpy as np
import torch

from da_lab.core.record import Metadata
from da_lab.hook import context, faults
from da_lab.hook.context import HookStep
from da_lab.hook.errors import DAUnsupported
from da_lab.hook.state import TRACKER, Decision


def _gather_index(kepts: list[np.ndarray]) -> np.ndarray:
    """(rows x max kept) logical block indices, each row padded with its last kept block."""
    width = max(len(k) for k in kepts)
    idx = np.empty((len(kepts), width), dtype=np.int64)
    for r, k in enumerate(kepts):
        idx[r, : len(k)] = k
        idx[r, len(k):] = k[-1]
    return idx


def _cpu_copy(t, n: int, new_seq: np.ndarray):
    if t is None:
        return None
    a = t.numpy().copy()
    a[:n] = new_seq[: min(n, len(a))]
    return torch.from_numpy(a)


def apply(cm, d: Decision):
    """The CommonAttentionMetadata the builder should see for decision `d`."""
    rows, kepts, new_seq = d.rows, d.kepts, d.new_seq
    src = cm.block_table_tensor
    n = len(new_seq)
    out = copy.copy(cm)      # shallow, as vLLM itself copies it per KV-cache group
    if src.device.type == "cpu":
        # Copy-on-write; numpy copies + from_numpy are microseconds instead of torch op chains.
        src_np = src.numpy()
        dst_np = src_np.copy()
        for i, k in zip(rows, kepts, strict=True):
            dst_np[i, : len(k)] = src_np[i, k]
        seq_np = cm.seq_lens.numpy().copy()
        seq_np[:n] = new_seq[: len(seq_np)]
        out.block_table_tensor, out.seq_lens = torch.from_numpy(dst_np), torch.from_numpy(seq_np)
    elif (ctx := context.current()).applied != (d.step, src.data_ptr()):
        # In place (CUDA graphs read these addresses): one gather for all masked rows.
        dev = src.device
        r = torch.as_tensor(np.asarray(rows, dtype=np.int64)).pin_memory().to(dev,
                                                                              non_blocking=True)
        idx = torch.from_numpy(_gather_index(kepts)).pin_memory().to(dev, non_blocking=True)
        src[r, : idx.shape[1]] = src[r].gather(1, idx)
        seq = cm.seq_lens
        saved = seq[r].clone()
        vals = torch.from_numpy(new_seq[np.asarray(rows)].astype(np.int64))
        seq[r] = vals.pin_memory().to(dev, non_blocking=True).to(seq.dtype)
        ctx.applied = (d.step, src.data_ptr())
        ctx.restore = (seq, r, saved)
    out.max_seq_len = int(new_seq[: cm.num_reqs].max())
    _follow(cm, out, n, new_seq)
    return out


# CommonAttentionMetadata field -> (treatment, why), for the installed release: set when the
# plugin loads (runners/common.install, from runners/cm_fields.py, which classifies every field).
_FIELDS: dict[str, tuple[str, str]] = {}


def use_fields(fields: dict[str, tuple[str, str]]) -> None:
    _FIELDS.clear()
    _FIELDS.update(fields)


def _follow(cm, out, n: int, new_seq: np.ndarray) -> None:
    """Every field derived from seq_lens follows the attention seq_lens (see cm_fields.py)."""
    for name, (how, why) in _FIELDS.items():
        val = getattr(cm, name, None)
        if how == "none" and val is not None:
            raise DAUnsupported(f"CommonAttentionMetadata.{name} is set ({why}); the DA edit "
                                "can't shorten rows for it")
        if val is None:
            continue
        if how == "seq":
            setattr(out, name, _cpu_copy(val, n, new_seq))
        elif how == "shift":        # seq_len - query_len, with the attention seq_len
            q = np.diff(cm.query_start_loc_cpu.numpy()[: n + 1])
            setattr(out, name, _cpu_copy(val, n, new_seq[:n] - q))
        elif how == "clear":
            setattr(out, name, None)


def restore_after_forward() -> None:
    """Put back the seq_lens the runner owns once the forward that read ours is queued."""
    ctx = context.current()
    if ctx.restore is not None:
        seq, rows, saved = ctx.restore
        seq[rows] = saved
        ctx.restore = None


def _host_copies(tensors: list) -> tuple[list, object]:
    """Copies of `tensors` for the host: numpy now on the CPU; on CUDA, copies queued behind the
    step's work (no sync: it would stall the next step's launch under async scheduling), with
    the event after which they are readable."""
    if tensors[0].device.type == "cpu":
        return [t.numpy().copy() for t in tensors], None
    host = [t.to("cpu", non_blocking=True) for t in tensors]
    ev = torch.cuda.Event()
    ev.record()
    return host, ev


def note_built(cm, log: HookStep) -> None:
    """Record what the builder actually received, on the step's own RequestSteps: the seq_lens
    (and, with rows recorded, the rows and the metadata bundle) the kernel reads."""
    if log.built:        # one record per step even if several builders run
        return
    log.built = True
    recs = log.requests
    if not TRACKER.record_rows:
        seq = cm.seq_lens.numpy() if cm.seq_lens.device.type == "cpu" else None
        for rec in recs:
            rec.note_built(int(seq[rec.row]) if seq is not None else rec.attn_seq_len, None)
        return
    bt = cm.block_table_tensor
    n = cm.num_reqs
    width = min(bt.shape[1], max(rec.blocks_total for rec in recs))
    (rows, seq, slots), ev = _host_copies(
        [bt[:n, :width], cm.seq_lens[:n], cm.slot_mapping[: cm.num_actual_tokens]])
    meta = Metadata(cm.query_start_loc_cpu.numpy().copy(), seq, slots, tuple(bt.shape),
                    int(cm.max_seq_len), TRACKER.backend, TRACKER.runner_class)
    log.metadata = meta

    def fill() -> None:
        if ev is not None:
            ev.synchronize()
        bt_h, seq_h = np.asarray(rows), np.asarray(seq)
        for rec in recs:
            s = int(seq_h[rec.row])
            rec.note_built(s, bt_h[rec.row, : -(-s // rec.block_size)])
        meta.seq_lens, meta.slot_mapping = seq_h, np.asarray(slots)

    if ev is None:
        fill()
    else:
        TRACKER.unsettled.append(fill)


def patch_builder_class(cls) -> None:
    if getattr(cls.build, "_da_wrapped", False):
        return
    orig = cls.build

    @functools.wraps(orig)
    def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
        ctx = context.current()
        d = ctx.decision
        t0 = time.perf_counter()
        cm = common_attn_metadata
        try:
            if ctx.log is not None:
                faults.check("build", (r.req for r in ctx.log.requests))
            if d is not None and d.masks:
                if common_prefix_len:
                    raise DAUnsupported("cascade attention (a shared prefix across the batch) "
                                        "cannot be combined with DA masks; start the engine "
                                        "with disable_cascade_attn=True")
                cm = apply(common_attn_metadata, d)
            if ctx.log is not None:
                note_built(cm, ctx.log)
                TRACKER.timing["apply_s"] += time.perf_counter() - t0
        except Exception as e:   # noqa: BLE001 - the step runs unmasked; the engine lives
            TRACKER.hook_error("the metadata edit", e, d.reqs if d is not None else None)
            restore_after_forward()
            ctx.decision = ctx.log = None
            cm = common_attn_metadata
        return orig(self, common_prefix_len, cm, *args, **kwargs)

    build._da_wrapped = True
    cls.build = build
    if hasattr(cls, "update_block_table"):
        orig_ubt = cls.update_block_table

        @functools.wraps(orig_ubt)
        def update_block_table(self, *args, **kwargs):
            d = context.current().decision
            if d is not None and d.masks:
                raise DAUnsupported("update_block_table reuses metadata across KV-cache groups, "
                                    "bypassing the DA edit; the hook serves one group only")
            return orig_ubt(self, *args, **kwargs)

        cls.update_block_table = update_block_table
