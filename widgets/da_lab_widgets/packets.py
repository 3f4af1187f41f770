"""The wire form of a run: each step record encoded once, compactly, for the browser.

A packet is `b"DAL1"`, a little-endian u32 length, that many bytes of JSON (padded with spaces
to a multiple of 4), then int32 data. The JSON holds the short things (ids, modes, tag text,
counts); every array is in the data, read in a fixed order (static/store.js `readPacket`
reads them back in the same order), so the JSON only says how long each one is:

    per request   the staged row as (blocks kept from the request's previous staged row, new
                  blocks): a decode step sends no block id at all, append_row one;
                  kept_logical and built_row; then the step's metadata: query_start_loc,
                  seq_lens, slot_mapping; then the KV map changes.
    runs          slot_mapping, kept_logical and KV block lists are sent as (first, count)
                  runs of consecutive values (-1, vLLM's padding slot, as repeated -1s): a
                  16k-token prefill's slot mapping is a few pairs, not 16k ids.
    carried       fields equal to the request's (or the metadata's) previous ones are left
                  out and carried forward by the decoder: block_size, batch row, directive,
                  backend, runner, block table shape.

A record is encoded once, relative to the records before it, so any range of records can be
sent again (a second tab, a reload) by concatenating what was encoded. Every value a diagram
shows is decoded from here, i.e. from a StepRecord (tests/test_packets.py decodes in Chromium and
compares with `StepRecord.to_json()`).
"""

from __future__ import annotations

import json

import numpy as np

from da_lab.core.record import StepRecord

MAGIC = b"DAL1"
_INT32 = (-(2**31), 2**31 - 1)
_REQ_CARRY = ("row", "bs", "d")
_MD_CARRY = ("bt", "be", "rn")


def runs(values) -> np.ndarray:
    """(first, count) pairs of maximal runs of values counting up by one; -1 (a padding slot)
    repeats in a run of its own. Flat int32: [first0, count0, first1, count1, ...]."""
    a = np.asarray(values, dtype=np.int64).ravel()
    if a.size == 0:
        return np.zeros(0, dtype=np.int32)
    if a.min() < _INT32[0] or a.max() > _INT32[1]:
        raise ValueError(f"a value outside int32 ({a.min()}..{a.max()}) cannot be sent")
    prev, cur = a[:-1], a[1:]
    cont = ((cur == prev + 1) & (prev != -1)) | ((cur == -1) & (prev == -1))
    starts = np.flatnonzero(np.concatenate(([True], ~cont)))
    counts = np.diff(np.concatenate((starts, [a.size])))
    return np.column_stack((a[starts], counts)).astype(np.int32).ravel()


def _i32(values) -> np.ndarray:
    a = np.asarray(values, dtype=np.int64).ravel()
    if a.size and (a.min() < _INT32[0] or a.max() > _INT32[1]):
        raise ValueError(f"a value outside int32 ({a.min()}..{a.max()}) cannot be sent")
    return a.astype(np.int32)


def encode_kv(kv: dict, data: list[np.ndarray]) -> dict | None:
    """A step's KV map changes ({"assign": {id: owners}, "free", "cached", "uncached"}): block
    ids as runs in `data`; None when nothing changed."""
    out: dict = {}
    groups: dict[tuple, list[int]] = {}
    for bid, owners in (kv.get("assign") or {}).items():
        groups.setdefault(tuple(owners), []).append(int(bid))
    if groups:
        out["as"] = []
        for owners, ids in groups.items():
            r = runs(sorted(ids))
            data.append(r)
            out["as"].append([list(owners), int(r.size)])
    for key, short in (("free", "fr"), ("cached", "ca"), ("uncached", "un")):
        ids = kv.get(key) or ()
        if len(ids):
            r = runs(sorted(int(b) for b in ids))
            data.append(r)
            out[short] = int(r.size)
    return out or None


class RunEncoder:
    """Encodes a run's records in order, once each; `packet(a, b)` is records a..b-1."""

    def __init__(self, header: dict) -> None:
        self.pieces: list[tuple[bytes, np.ndarray]] = []    # (JSON of the step, its data)
        self._rows: dict[str, np.ndarray] = {}     # each request's last staged row
        self._carry: dict[str, dict] = {}          # each request's last carried fields
        self._md: dict = {}
        data: list[np.ndarray] = []
        init = header.get("initial_kv")
        self._init = (encode_kv(init, data) if isinstance(init, dict) else None,
                      _concat(data))

    def __len__(self) -> int:
        return len(self.pieces)

    def extend(self, records: list[StepRecord]) -> int:
        """Encode the records not encoded yet; returns how many were new."""
        n = len(self.pieces)
        for rec in records[n:]:
            data: list[np.ndarray] = []
            obj = self._step(rec, data)
            self.pieces.append((json.dumps(obj, separators=(",", ":")).encode(), _concat(data)))
        return len(self.pieces) - n

    def packet(self, start: int = 0, stop: int | None = None) -> bytes:
        """Records start..stop-1 as one packet (from 0: with the KV map the run began with)."""
        stop = len(self.pieces) if stop is None else stop
        parts = self.pieces[start:stop]
        head = b'{"from":%d' % start
        data = [p[1] for p in parts]
        if start == 0 and self._init[0] is not None:
            head += b',"init":' + json.dumps(self._init[0], separators=(",", ":")).encode()
            data.insert(0, self._init[1])
        text = head + b',"steps":[' + b",".join(p[0] for p in parts) + b"]}"
        text += b" " * (-len(text) % 4)
        return MAGIC + np.uint32(len(text)).tobytes() + text + _concat(data).tobytes()

    # ---- one record ----------------------------------------------------------------------
    def _step(self, rec: StepRecord, data: list[np.ndarray]) -> dict:
        obj: dict = {"s": rec.step, "w": rec.wall_s, "hu": rec.hook_us,
                     "q": [self._request(h, data) for h in rec.requests]}
        md = rec.metadata
        if md is None:
            obj["md"] = None
        else:
            sm = runs(md.slot_mapping if md.slot_mapping is not None else [])
            q, sl = _i32(_or_empty(md.query_start_loc)), _i32(_or_empty(md.seq_lens))
            data += [q, sl, sm]
            m = {"q": int(q.size), "sl": int(sl.size), "sm": int(sm.size),
                 "bt": list(md.block_table_shape), "mx": md.max_seq_len, "be": md.backend,
                 "rn": md.runner}
            obj["md"] = _carried(m, self._md, _MD_CARRY)
        kv = encode_kv(rec.kv or {}, data)
        if kv is not None:
            obj["kv"] = kv
        if rec.added:
            obj["ad"] = rec.added
        if rec.warnings:
            obj["wn"] = rec.warnings
        return obj

    def _request(self, h, data: list[np.ndarray]) -> dict:
        r: dict = {"id": h.req}
        if h.hooked:
            full = {"row": h.row, "bs": h.block_size, "d": h.directive}
            r.update(_carried(full, self._carry.setdefault(h.req, {}), _REQ_CARRY))
            r.update(sl=h.seq_len, ql=h.query_len, no=h.n_output_seen)
            if h.tokens_unseen:
                r["tu"] = h.tokens_unseen
            if h.tag_buffer:
                r["tb"] = h.tag_buffer
            if h.events:
                r["ev"] = h.events
            if h.staged_row is not None:
                row = _i32(h.staged_row)
                prev = self._rows.get(h.req)
                keep = _common_prefix(prev, row) if prev is not None else 0
                data.append(row[keep:])
                r["sr"] = [keep, int(row.size - keep)]
                self._rows[h.req] = row
            if h.kept_logical is not None:
                k = runs(h.kept_logical)
                data.append(k)
                r["kl"] = int(k.size)
            if h.partial_logical is not None:     # read in this order by store.js
                pk = runs(h.partial_logical)
                data.append(pk)
                r["pl"] = int(pk.size)
            if h.built_row is not None:
                b = _i32(h.built_row)
                data.append(b)
                r["br"] = int(b.size)
            if h.built_seq_len is not None:
                r["bl"] = h.built_seq_len
            if h.groups is not None:              # a hybrid model's other groups' rows
                gr = []
                for g in h.groups:
                    row = _i32(g.row)
                    data.append(row)
                    gr.append([g.group, g.kind, g.block_size, g.window, int(row.size)])
                r["gr"] = gr
        if h.new_token_ids is not None:
            r.update(nt=list(h.new_token_ids), tx=h.new_text, f=h.finished)
        return r


def _carried(now: dict, last: dict, keys: tuple) -> dict:
    """`now` without the keys whose values equal `last`'s (then remembers `now`)."""
    out = {k: v for k, v in now.items() if k not in keys or k not in last or last[k] != v}
    last.update(now)
    return out


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def _or_empty(a):
    return [] if a is None else a


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, dtype=np.int32)
