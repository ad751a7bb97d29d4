"""Which models are decoder-only (causal) LMs, and their logits at the completion's target positions.

A causal LM's logit at position t predicts the token at t + 1. Its batches (:mod:`uat_hf.data.causal_data`) hold
``labels`` aligned with ``input_ids``: -100 on the prompt and on padding, the completion's ids elsewhere.
So the logits that score label position t are those at t - 1, and :func:`causal_target_logits` returns, for
a ``[B, T]`` mask over the labels, the ``[M, V]`` logits that predict exactly the masked labels, in the
same row-major order as ``labels[mask]``. Every measure (:mod:`uat_hf.strategies.multiuat.measures`), the EOS
position of EntEOS
(the EOS that ends the completion) and the token loss of the gradient cosine then read the labels as they
do for a seq2seq model; the shift lives here only.

The model is given ``position_ids`` counted from the attention mask (:func:`mask_position_ids`, as ``generate``
counts them): a left-padded batch (a tokenizer with ``padding_side="left"``) would otherwise place each row's
tokens at positions shifted by its padding, which changes every logit of a model with absolute position
embeddings (GPT-2; issue 34 found the measures up to 9.8 % off and the dev loss 6.684 instead of 6.712, a random
tiny GPT-2 gives 7.080 instead of 7.088 in ``tests/test_causal_positions.py``). Models with rotary positions
(Llama, Qwen2) were unaffected: rotary attention depends on relative positions only.

Only models that transformers itself maps as causal LMs (``MODEL_FOR_CAUSAL_LM_MAPPING``: Llama, Qwen2,
Mistral, GPT-2, ...) count; a peft (LoRA) model is read through its base model.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping

import torch
from torch import nn

__all__ = ["causal_target_logits", "is_causal_lm", "mask_position_ids"]

#: Causal model types whose logits are ``lm_head(final hidden state)`` with nothing after it (no soft-capping
#: or scaling): for them the output layer runs at the scored positions only, which saves a ``[B, T, V]``
#: tensor (V = 151,936 for Qwen2.5).
_PLAIN_HEAD_TYPES = {"llama", "qwen2", "qwen3", "mistral"}


def _base(model: nn.Module) -> nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def is_causal_lm(model: nn.Module) -> bool:
    """Whether ``model`` (or a peft model's base) is a transformers ``*ForCausalLM`` decoder-only model."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    base = _base(model)
    config = getattr(base, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    return type(base).__name__ in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


def causal_target_logits(model: nn.Module, batch: Mapping[str, torch.Tensor], mask: torch.Tensor, *,
                         whole: bool = False) -> torch.Tensor:
    """Logits ``[M, V]`` predicting the M labels where ``mask`` (``[B, T]`` over ``labels``) is True.

    Position 0 has no preceding token to predict it from, so a mask true there is refused (the prompt is never
    empty, so its label is always -100). ``whole``: call the model as a whole (a sharded model), never its
    parts.
    """
    if bool(mask[:, 0].any()):
        raise ValueError("A causal-LM batch has a real label at position 0, which no logit predicts: the labels must "
                         "be -100 on the prompt (uat_hf.data.causal_data.tokenize_causal_corpus makes them so).")
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask") if k in batch}
    predicting = mask[:, 1:]
    base = _base(model)
    if "attention_mask" in inputs and _takes_position_ids(type(_innermost(model))):
        inputs["position_ids"] = mask_position_ids(inputs["attention_mask"])
    if not whole and getattr(base.config, "model_type", None) in _PLAIN_HEAD_TYPES and hasattr(base, "model"):
        hidden = base.model(**inputs).last_hidden_state[:, :-1][predicting]
        return base.get_output_embeddings()(hidden)
    return model(**inputs).logits[:, :-1][predicting]


def mask_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each token's position among its row's real tokens (``attention_mask.cumsum(-1) - 1``, padding before the
    first token clamped to 0), as ``generate`` computes them: the same for a row padded on either side or not."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _innermost(model: nn.Module) -> nn.Module:
    """The transformers model inside peft, DDP, FSDP1 or DeepSpeed wrappers (whose ``forward`` takes ``**kwargs``)."""
    while isinstance(getattr(_base(model), "module", None), nn.Module):
        model = _base(model).module
    return _base(model)


@functools.cache
def _takes_position_ids(model_class: type) -> bool:
    return "position_ids" in inspect.signature(model_class.forward).parameters
