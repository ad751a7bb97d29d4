"""Where a translation model predicts its targets: which label positions count, and the logits there.

Balancing rewards, the corpus-health checks and the evaluation all read the model the same way: the label
positions that are real target tokens (:func:`scored_mask`: not -100, not the language code that opens the labels
under NLLB, M2M100 or mBART-50), and the logits that predict them, teacher-forced (:func:`target_logits`), with
the output layer applied to those positions only where the model allows it. The model may be a peft (LoRA) model
or sharded across ranks (:func:`~uat_hf.models.modes.sharding`); it must be encoder-decoder or a causal LM
(:func:`require_supported_model`), the two kinds whose logit for each label is known.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import torch
from torch import nn

from ..utils.columns import IGNORE_INDEX, MODEL_COLUMNS
from .causal_lm import causal_target_logits, is_causal_lm
from .modes import sharding

__all__ = ["OutputLayer", "require_supported_model", "scored_mask", "target_features", "target_logits"]

#: Model types whose logits are ``lm_head(decoder hidden state) [+ final_logits_bias]``: for them the output
#: layer can be applied to real target positions only.
_HEAD_ON_HIDDEN_TYPES = {"marian", "bart", "mbart", "pegasus", "m2m_100", "blenderbot", "blenderbot-small"}


def require_supported_model(model: nn.Module) -> None:
    """Refuse a model that is neither encoder-decoder (``config.is_encoder_decoder``) nor a decoder-only causal
    LM (:func:`~uat_hf.models.causal_lm.is_causal_lm`), naming its class.

    Why: the rewards read the logits that predict each label, and know where those are for these two kinds only
    (position t for a sequence-to-sequence model, t - 1 for a causal LM); for any other model (an encoder-only
    masked LM, a custom module) every measure would score the wrong token, silently.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft: the wrapped model
    config = getattr(base, "config", None)
    if not getattr(config, "is_encoder_decoder", False) and not is_causal_lm(model):
        kind = f" (model_type {config.model_type!r})" if getattr(config, "model_type", None) else ""
        raise ValueError(
            f"{type(base).__name__}{kind} is neither an encoder-decoder model (config.is_encoder_decoder) nor a "
            "decoder-only causal LM (a transformers *ForCausalLM class). uat-hf balances translation models of these "
            "two kinds only (MarianMT, BART/mBART, M2M100/NLLB, T5, ...; Llama, Qwen2, GPT-2, ...): load the model "
            "with AutoModelForSeq2SeqLM or AutoModelForCausalLM."
        )


def scored_mask(labels: torch.Tensor, language_code_ids: Collection[int] = ()) -> torch.Tensor:
    """``[B, T]`` True on the label positions a reward scores: real target tokens (not -100), except a
    language code (one of ``language_code_ids``) at the first real position of a row.

    Why: under NLLB, M2M100 and mBART-50 the labels open with the target-language code, fixed by the corpus
    rather than translated. The authors' code feeds the language token as the decoder's first input and never
    scores it; in a one-to-many run it cannot be predicted from the source, so scoring it would inflate the
    uncertainty of every corpus. The code still is the decoder's input at the next position, as in training.
    """
    mask = labels != IGNORE_INDEX
    if not language_code_ids or labels.numel() == 0:
        return mask
    rows = torch.arange(labels.shape[0], device=labels.device)
    first = mask.to(torch.int8).argmax(dim=1)  # first real position of each row (0 for a row without one)
    codes = torch.as_tensor(sorted(language_code_ids), dtype=labels.dtype, device=labels.device)
    opens = mask[rows, first] & torch.isin(labels[rows, first], codes)
    mask[rows[opens], first[opens]] = False
    return mask


def target_logits(model: nn.Module, batch: Mapping[str, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """Logits [M, V] at the M real target positions (``mask``), teacher-forced on the reference prefix.

    Without ``decoder_input_ids`` in the batch (the collator makes them only for models that have
    ``prepare_decoder_input_ids_from_labels``; M2M100 has not) the model is given the labels and shifts them
    with its own decoder-start convention; the base model alone would not (BART's would shift the source).
    A peft model is read through its base model, whose layers carry the adapters. A sharded model
    (:func:`~uat_hf.models.modes.sharding`) is called as a whole: its root gathers the parameters its submodules
    share, so the output layer then runs at every position. A decoder-only model's logits are shifted by one
    (:func:`~uat_hf.models.causal_lm.causal_target_logits`).
    """
    features, head = target_features(model, batch, mask)
    return head(features)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def target_features(model: nn.Module, batch: Mapping[str, torch.Tensor],
                     mask: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """``(features, head)`` with ``head(features)`` the logits of :func:`target_logits`: the decoder's hidden
    states at ``mask`` and the output layer where it can be applied to them alone, else the logits themselves
    and the identity. An ``encoder_outputs`` in the batch (a ``BaseModelOutput`` of the encoder) is the encoding
    of its sources, so the encoder does not run again."""
    if is_causal_lm(model):
        return causal_target_logits(model, batch, mask, whole=sharding(model) is not None), _identity
    if "decoder_input_ids" not in batch:
        inputs = {k: batch[k] for k in (*MODEL_COLUMNS, "encoder_outputs") if k in batch}
        return model(**inputs).logits[mask], _identity
    keys = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask", "encoder_outputs")
    inputs = {k: batch[k] for k in keys if k in batch}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft: adapters are in its layers
    head_on_hidden = getattr(base.config, "model_type", None) in _HEAD_ON_HIDDEN_TYPES and hasattr(base, "model")
    if head_on_hidden and sharding(model) is None:
        hidden = base.model(**inputs).last_hidden_state[mask]
        return hidden, OutputLayer(base)
    return model(**inputs).logits[mask], _identity


class OutputLayer:
    """The output layer of ``base`` (and its ``final_logits_bias``), applied to hidden states."""

    def __init__(self, base: nn.Module) -> None:
        self.layer = base.get_output_embeddings()
        self.bias = getattr(base, "final_logits_bias", None)
        self.vocabulary = int(self.layer.weight.shape[0])

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.layer(hidden)
        return logits + self.bias[0] if self.bias is not None else logits
