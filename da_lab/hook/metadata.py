"""The DA edit itself (`KernelEdit`), shared by both model runners: the backend's
`MetadataBuilder.build` receives a CommonAttentionMetadata whose *read* path
(block_table_tensor, seq_lens, max_seq_len and their CPU copies) covers only the kept blocks.
Slot mapping (the KV *writes*) is untouched.

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

import copy as _copy

import numpy as np
import torch

from da_lab.hook.errors import DAUnsupported


def _gather_index(kepts: list[np.ndarray]) -> np.ndarray:
    """(rows x max kept) logical block indices, each row padded with its last kept block."""
    width = max(len(k) for k in kepts)
    idx = np.empty((len(kepts), width), dtype=np.int64)
    for r, k in enumerate(kepts):
        idx[r, : len(k)] = k
        idx[r, len(k):] = k[-1]
    return idx


def _in_units(kept: np.ndarray, units: int) -> np.ndarray:
    """Kept KV blocks as the kernel blocks of a row in `units`-per-block kernel blocks: kernel
    block b * units + j is part j of KV block b (vLLM maps them so)."""
    if units == 1:
        return kept
    return (np.asarray(kept, dtype=np.int64)[:, None] * units + np.arange(units)).reshape(-1)


def _cpu_copy(t, n: int, new_seq: np.ndarray):
    if t is None:
        return None
    a = t.numpy().copy()
    a[:n] = new_seq[: min(n, len(a))]
    return torch.from_numpy(a)


class KernelEdit:
    """The one owner of a step's kernel-row edit and its undo. Made from the step's plan
    (hook/plan.StepPlan: masked rows, kept blocks, the shortened seq_lens); `apply` gives the
    builder its CommonAttentionMetadata, `undo` puts back what the runner owns (CUDA)."""

    def __init__(self, plan, fields: dict) -> None:
        masked = plan.masked
        self.rows = [p.row for p in masked]
        self.kepts = [p.kept for p in masked]
        self.new_seq = plan.new_seq
        self.fields = fields           # how each CommonAttentionMetadata field follows the rows
        self._applied = None           # CUDA: the block-table address already edited in place
        self._restore = None           # CUDA: (seq_lens, rows, saved values) to put back

    def apply(self, cm, units: int = 1, copy: bool = False):
        """The CommonAttentionMetadata the builder should read: kernel rows, attention seq_lens
        and every field derived from them; the slot mapping (the KV writes) untouched.
        `units`: kernel blocks per kept block in the builder's rows. `copy`: new tensors even
        on CUDA (a hybrid model: its other groups share the runner's seq_lens, and its
        attention runs outside CUDA graphs); else on CUDA the edit is made in place, where the
        captured graphs read."""
        new_seq = self.new_seq
        src = cm.block_table_tensor
        n = len(new_seq)
        out = _copy.copy(cm)     # shallow, as vLLM itself copies it per KV-cache group
        if src.device.type == "cpu":
            # Copy-on-write (on the CPU the committed row is the staged row); numpy copies +
            # from_numpy are microseconds instead of torch op chains.
            out.block_table_tensor = self.table(src, units)
            seq_np = cm.seq_lens.numpy().copy()
            seq_np[:n] = new_seq[: len(seq_np)]
            out.seq_lens = torch.from_numpy(seq_np)
        elif copy:
            out.block_table_tensor = self.table(src, units)
            seq = cm.seq_lens.clone()
            r = self._device_rows(src.device)
            seq[r] = self._device_seq(src.device, seq.dtype)
            out.seq_lens = seq
        elif self._applied != src.data_ptr():
            # In place (CUDA graphs read these addresses): one gather for all masked rows.
            # Several builders may share the tensor: edited once.
            dev = src.device
            r = self._device_rows(dev)
            idx = self._device_index(dev, units)
            src[r, : idx.shape[1]] = src[r].gather(1, idx)
            seq = cm.seq_lens
            saved = seq[r].clone()
            seq[r] = self._device_seq(dev, seq.dtype)
            self._applied = src.data_ptr()
            self._restore = (seq, r, saved)
        out.max_seq_len = int(new_seq[: cm.num_reqs].max())
        _follow(cm, out, n, new_seq, self.fields)
        return out

    def table(self, src, units: int = 1):
        """A copy of block table `src`, every masked row turned into its kernel row."""
        if src.device.type == "cpu":
            src_np = src.numpy()
            dst_np = src_np.copy()
            for i, k in zip(self.rows, self.kepts, strict=True):
                k = _in_units(k, units)
                dst_np[i, : len(k)] = src_np[i, k]
            return torch.from_numpy(dst_np)
        dst = src.clone()
        r = self._device_rows(src.device)
        idx = self._device_index(src.device, units)
        dst[r, : idx.shape[1]] = src[r].gather(1, idx)
        return dst

    def _device_rows(self, dev):
        return torch.as_tensor(np.asarray(self.rows, dtype=np.int64)).pin_memory().to(
            dev, non_blocking=True)

    def _device_index(self, dev, units: int):
        idx = _gather_index([_in_units(k, units) for k in self.kepts])
        return torch.from_numpy(idx).pin_memory().to(dev, non_blocking=True)

    def _device_seq(self, dev, dtype):
        vals = torch.from_numpy(self.new_seq[np.asarray(self.rows)].astype(np.int64))
        return vals.pin_memory().to(dev, non_blocking=True).to(dtype)

    def undo(self) -> None:
        """Put back the seq_lens the runner owns once the forward that read ours is queued."""
        if self._restore is not None:
            seq, rows, saved = self._restore
            seq[rows] = saved
            self._restore = None


def _follow(cm, out, n: int, new_seq: np.ndarray, fields: dict) -> None:
    """Every field derived from seq_lens follows the attention seq_lens (see cm_fields.py)."""
    for name, (how, why) in fields.items():
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


def host_copies(tensors: list) -> tuple[list, object]:
    """Copies of `tensors` for the host: numpy now on the CPU; on CUDA, copies queued behind the
    step's work (no sync: it would stall the next step's launch under async scheduling), with
    the event after which they are readable."""
    if tensors[0].device.type == "cpu":
        return [t.numpy().copy() for t in tensors], None
    host = [t.to("cpu", non_blocking=True) for t in tensors]
    ev = torch.cuda.Event()
    ev.record()
    return host, ev
