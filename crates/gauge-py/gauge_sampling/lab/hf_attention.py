"""Decode-step attention for the hf engine that reads each KV head once.

With an attention mask (the engine always has one: left padding), transformers' ``sdpa`` path
turns grouped-query attention off for the sake of CUDA kernels and copies every KV head
``num_key_value_groups`` times, in every layer, at every step (``repeat_kv``). On CPU that copy
was ~8 % of the quick grid's decode, and the larger reads behind it cost more in attention and
in the matrix products that follow. Here a one-token query is regrouped instead: the query
heads that share a KV head become that head's rows, ``[B, H, 1, D] → [B, H_kv, H/H_kv, D]``,
and one ``scaled_dot_product_attention`` call reads the cache as it is. The result is the same
attention; its float rounding differs from ``sdpa``'s (the kernels block the rows differently):
at most 6.1e-5 measured on logits of ~20 (about 30 ulps), and token-identical on all 300 runs of
the quick grid. Anything else (prefill, no grouping, position bias, a paged cache, attention
weights asked for) goes to transformers' own ``sdpa`` function unchanged.

Registered with transformers' ``AttentionInterface`` under :data:`NAME`, with ``sdpa``'s mask.
The device and dtype are the inputs'.
"""

from __future__ import annotations

import torch

try:  # transformers' extension points (recent 4.x, 5.x); without them the engine keeps sdpa
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError:  # pragma: no cover - depends on the installed transformers
    AttentionInterface = None

#: The name the engine sets as the model's attention implementation.
NAME = "gauge_grouped_sdpa"


def grouped_sdpa(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs
):
    """transformers' attention-function signature; ``query`` is [B, H, L, D], ``key`` and
    ``value`` [B, H_kv, S, D]; returns ([B, L, H, D], None)."""
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    plain = (
        q_len != 1
        or kv_heads == heads
        or heads % kv_heads
        or kwargs.get("position_bias") is not None
        or kwargs.get("cache") is not None
        or kwargs.get("output_attentions", False)
        or (attention_mask is not None and attention_mask.shape[1] != 1)
    )
    if plain:
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    groups = heads // kv_heads
    # Head h uses KV head h // groups (transformers' repeat_kv order), so a reshape groups them.
    q = query.reshape(batch, kv_heads, groups, dim)
    mask = attention_mask
    if mask is not None:
        # [B, 1, 1, S] → [B, 1, groups, S]: every grouped row sees its sequence's mask.
        mask = mask.expand(batch, 1, groups, key.shape[-2])
    out = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


if AttentionInterface is not None:
    AttentionInterface.register(NAME, grouped_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def use_grouped_attention(model) -> bool:
    """Switch ``model`` from ``sdpa`` to :data:`NAME`; False (left as it is) for any other
    implementation, or a transformers without the extension points. The caller records the
    model's implementation either way."""
    if AttentionInterface is None or getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    model.set_attn_implementation(NAME)
    return True
