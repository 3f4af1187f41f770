"""The model side of training: build the tiny Llama (with an optional previous-token head),
the masked forward with its loss targets, and teacher-forced held-out accuracy."""

from __future__ import annotations

from da_lab.training.data import task as T
from da_lab.training.trainer.batches import collate
from da_lab.training.trainer.masks import dense_mask, layer_masks


def build_model(cfg: dict, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    conf = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",
                                                                     "torch_dtype")})
    conf._attn_implementation = "sdpa"
    model = LlamaForCausalLM(conf)
    return model


def wire_previous_token_head(model, strength: float = 8.0, shared: float = 0.25,
                             pairs: int = 8, seed: int = 0) -> None:
    """Initialise attention head 0 of layer 0 as a previous-token head (before training).

    The task's retrievals are induction copies ("days" seen before "7": after "days" write
    "7"; the chunk label is the token before the key), and induction needs a head that moves
    each token's predecessor into it. Left to gradient descent, that head forms only after a
    long plateau (runs without it learned no retrieval at all in minutes of H200 time); here it
    is there from step 0, and training may change it like any other weight.

    How: token embeddings get a shared component `shared * u` (u a fixed random unit vector)
    and their own parts are made orthogonal to u and of equal norm, so after the first RMSNorm
    every token reads the same value along u. (With tied embeddings the shared part adds the
    same logit to every token, which softmax ignores.) Head 0's query and key read only u,
    giving content-free vectors; in each of the `pairs` fastest RoPE frequency pairs the key is
    turned by one position's angle, so query i . key j = strength^2 sum_m cos((i - j - 1) th_m)
    / sqrt(head_dim): largest at j = i - 1, ~8 logits above its neighbours by default.
    """
    import torch

    c = model.config
    d, hd = c.hidden_size, c.head_dim
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(d, generator=g)
    u /= u.norm()
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        e = emb.float()
        e = e - (e @ u)[:, None] * u[None, :]
        norms = e.norm(dim=1, keepdim=True)
        e = e * (norms.mean() / norms.clamp_min(1e-8)) + shared * u[None, :]
        emb.copy_(e.to(emb.dtype))
        x = e / e.pow(2).mean(-1, keepdim=True).add(c.rms_norm_eps).sqrt()
        proj = float((x @ u).mean())
        half = hd // 2
        th = model.model.rotary_emb.inv_freq.float().cpu()[:half]      # RoPE's own angles
        on = (torch.arange(half) < pairs).float()
        q = torch.cat([strength * on, torch.zeros(half)])
        k = torch.cat([strength * on * torch.cos(th), strength * on * torch.sin(th)])
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight[:hd] = torch.outer(q, u) / proj
        attn.k_proj.weight[:hd] = torch.outer(k, u) / proj


def to_device(batch: dict, device) -> dict:
    import torch

    out = {k: torch.from_numpy(v) for k, v in batch.items()}
    if device.type == "cuda":
        return {k: v.pin_memory().to(device, non_blocking=True) for k, v in out.items()}
    return {k: v.to(device) for k, v in out.items()}


def forward(model, batch: dict, block_size: int, masked: bool = True):
    """(logits at response rows (N, V), targets (N,), row index (N,) into the flat batch)."""
    import torch

    ids = batch["ids"]
    B, L = ids.shape
    row_seg = batch["row_seg"] if masked else torch.zeros_like(batch["row_seg"])
    mask = dense_mask(row_seg, batch["seg_visible"], L, block_size, ids.device)
    # A hybrid model's sliding-window layers keep their window: DA masks its global layers only.
    h = model.model(input_ids=ids, attention_mask=layer_masks(model.config, mask),
                    use_cache=False).last_hidden_state
    sel = (batch["targets"] >= 0).reshape(-1).nonzero().squeeze(1)
    logits = model.lm_head(h.reshape(B * L, -1).index_select(0, sel))
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:                                  # Gemma's own head does this after lm_head
        logits = torch.tanh(logits / cap) * cap
    return logits, batch["targets"].reshape(-1)[sel], sel


def accuracy(model, samples: list[T.Sample], device, block_size: int, batch: int = 64,
             autocast: bool = False) -> dict:
    """Held-out accuracy in plain torch, teacher-forced (equal to greedy decoding whenever the
    prefix is right): tag = every tag token is the argmax; DA answer = tag right and every
    answer token and </s> the argmax under the tag's DA mask; all-blocks answer = every
    answer token and </s> the argmax with plain causal attention."""
    import torch

    tok = T.tokens()
    res = {"tag": [], "da": [], "all": []}
    by_kind: dict[str, list[int]] = {}
    model.eval()
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        for i in range(0, len(samples), batch):
            part = samples[i: i + batch]
            b = to_device(collate(part, tok.pad_id, block_size), device)
            out = {}
            for masked in (True, False):
                logits, tgt, sel = forward(model, b, block_size, masked)
                ok = (logits.argmax(-1) == tgt)
                L = b["ids"].shape[1]
                row = sel // L
                is_tag = b["tag_row"].reshape(-1)[sel]
                n = len(part)
                bad_tag = torch.zeros(n, dtype=torch.long, device=device).index_add_(
                    0, row, (~ok & is_tag).long())
                bad_ans = torch.zeros(n, dtype=torch.long, device=device).index_add_(
                    0, row, (~ok & ~is_tag).long())
                out[masked] = (bad_tag == 0, bad_ans == 0)
            tag_ok = out[True][0].cpu().tolist()
            da_ok = (out[True][0] & out[True][1]).cpu().tolist()
            all_ok = out[False][1].cpu().tolist()
            res["tag"] += tag_ok
            res["da"] += da_ok
            res["all"] += all_ok
            for s, t, d in zip(part, tag_ok, da_ok, strict=True):
                by_kind.setdefault(s.kind, []).append(int(t and d))
    model.train()
    n = max(1, len(res["tag"]))
    return {"n": len(res["tag"]), "tag_accuracy": sum(res["tag"]) / n,
            "da_answer_accuracy": sum(res["da"]) / n,
            "all_blocks_answer_accuracy": sum(res["all"]) / n,
            "by_kind": {k: sum(v) / len(v) for k, v in sorted(by_kind.items())}}
