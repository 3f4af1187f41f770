// Diagram 3's words: the step's real values (from one step of the run) and the texts that show
// them — the packet's card at each box, the line of all values, the hovered block's note.

const N_SHOW = 6, MAX_REQS = 3;

export function short(xs, n = N_SHOW) {
  if (xs === null || xs === undefined) return "—";
  const a = Array.from(xs);
  return a.length <= n ? `[${a.join(", ")}]` : `[${a.slice(0, n).join(", ")}, … +${a.length - n}]`;
}

const plural = (n, w) => `${n} ${w}${n !== 1 ? "s" : ""}`;

// the step's values the packet carries (the hook's view for seq_lens "full")
export function stepValues(rec) {
  const md = rec.metadata;
  const kernelSeq = md ? Array.from(md.seq_lens) : [];
  const full = kernelSeq.slice();
  const reqs = [];
  for (const h of rec.requests) {
    if (!h.hooked) continue;
    if (h.row < full.length) full[h.row] = h.seq_len;
    const staged = h.staged_row ? Array.from(h.staged_row) : [];
    reqs.push({ req: h.req, row: h.row, mode: h.mode, seq_len: h.seq_len,
                attn_seq_len: h.built_seq_len ?? h.attn_seq_len, query_len: h.query_len,
                staged, kernel_row: h.kernel_row ? Array.from(h.kernel_row) : [],
                blocks_staged: staged.length || h.blocks_total, blocks_read: h.blocks_read });
  }
  const sm = md ? md.slot_mapping : [];
  return { step: rec.step, requests: reqs, has: !!md,
           scheduled: rec.requests.filter((h) => h.hooked).map((h) => [h.req, h.query_len]),
           qsl: md ? Array.from(md.query_start_loc) : null, full, kernel: kernelSeq,
           max: md ? md.max_seq_len : null, shape: md ? md.block_table_shape : null, sm,
           backend: md ? md.backend : null };
}

function body(key, v, impl, nAttn) {
  const reqs = v.requests.slice(0, MAX_REQS);
  if (key === "scheduler") {
    return v.scheduled.slice(0, MAX_REQS).map(([r, q]) => `${r}: ${plural(q, "token")} scheduled`)
      .join("\n") || "nothing scheduled";
  }
  if (key === "block_table") {
    return reqs.map((r) => `${r.req}: staged row ${r.blocks_staged} blocks ${short(r.staged)}\n`
      + `seq_len ${r.seq_len}`).join("\n");
  }
  if (key === "hook") {
    return reqs.map((r) => `${r.req} (${r.mode}): seq_len ${r.seq_len} → ${r.attn_seq_len}\n`
      + `row ${r.blocks_staged} → ${r.blocks_read} blocks ${short(r.kernel_row)}`
      + (r.seq_len === r.attn_seq_len ? "  (unchanged)" : "")).join("\n");
  }
  if (key === "builder") {
    return `query_start_loc ${short(v.qsl)}\nseq_lens ${short(v.kernel)} (full: ${short(v.full)})\n`
      + `block_table (${(v.shape || []).join(", ")}), max_seq_len ${v.max}\n`
      + `slot_mapping ${short(v.sm)}`;
  }
  if (key === "context") {
    return `one ${v.backend} metadata for this forward,\nread by all ${nAttn} attention layers`;
  }
  if (key === "layer") return `${plural(v.sm.length, "new token")} of q, k, v per layer → ${impl}`;
  return reqs.map((r) => `${r.req}: reads ${r.blocks_read} of ${r.blocks_staged} blocks `
    + `(${r.attn_seq_len} of ${r.seq_len} tokens)`).join("\n")
    + `\nwrites KV at slots ${short(v.sm)}`;
}

export function cardText(v, stage, impl, nAttn) {
  const head = `step ${v.step} · ${stage.title}\n`;
  if (!v.has) return `${head}no attention metadata recorded this step`;
  const listed = { scheduler: v.scheduled, block_table: v.requests, hook: v.requests,
                   impl: v.requests }[stage.key] || [];
  const more = listed.length - MAX_REQS;
  return head + body(stage.key, v, impl, nAttn)
    + (more > 0 ? `\n… and ${more} more request${more > 1 ? "s" : ""}` : "");
}

export function valuesText(v, impl) {
  if (!v.has) return `step ${v.step}: no attention metadata recorded`;
  const out = [`step ${v.step} · backend ${v.backend} · impl ${impl} · query_start_loc ${short(v.qsl)}`,
    `seq_lens full ${short(v.full)} → kernel ${short(v.kernel)} · block_table shape `
    + `(${(v.shape || []).join(", ")}) · slot_mapping ${short(v.sm)} (${v.sm.length} slots)`];
  for (const r of v.requests.slice(0, MAX_REQS)) {
    out.push(`${r.req}: blocks staged ${r.blocks_staged} ${short(r.staged, 10)} · blocks read `
      + `${r.blocks_read} ${short(r.kernel_row, 10)}`);
  }
  if (v.requests.length > MAX_REQS) out.push(`… and ${v.requests.length - MAX_REQS} more requests`);
  return out.join("\n");
}

export function blockNote(v, b) {
  const parts = [];
  for (const r of v.requests) {
    const j = r.staged.indexOf(b);
    if (j >= 0) {
      parts.push(`${r.req}: logical block ${j}, `
        + (r.kernel_row.includes(b) ? "read by the kernel" : "HIDDEN from the kernel"));
    }
  }
  return `physical block ${b}: ${parts.length ? parts.join("; ") : "not in any row this step"}`;
}
