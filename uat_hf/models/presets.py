"""Model presets: the paper's Transformer sizes as ``MarianConfig`` keyword arguments, plus CPU sizes, and
published architectures (NLLB-600M) with random weights for benchmarks.

The paper trains fairseq Transformers from scratch; ``MarianMTModel`` is the same architecture (post-norm
encoder-decoder, sinusoidal positions, embeddings scaled by sqrt(d_model), shared joint-vocabulary
embeddings) and is what ``Helsinki-NLP/opus-mt-*`` checkpoints load into, so one code path serves both a
model trained from a preset and a pretrained checkpoint. The presets use fairseq's ReLU feed-forward.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..utils.hub_errors import HubUnavailableError, hub_unavailable_message, is_hub_id, is_hub_unreachable
from .causal_presets import build_causal_model, is_causal_checkpoint

if TYPE_CHECKING:  # the model classes import torch: only the functions that build a model load them
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_FAIRSEQ_STYLE: dict[str, Any] = {
    "activation_function": "relu",
    "scale_embedding": True,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
}


def _transformer(
    layers: int, heads: int, d_model: int, ffn: int, dropout: float, max_positions: int
) -> dict[str, Any]:
    return {
        **_FAIRSEQ_STYLE,
        "encoder_layers": layers,
        "decoder_layers": layers,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "d_model": d_model,
        "encoder_ffn_dim": ffn,
        "decoder_ffn_dim": ffn,
        "dropout": dropout,
        "max_position_embeddings": max_positions,
    }


#: ``MarianConfig`` keyword arguments per preset (vocabulary and special-token ids come from the tokenizer).
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # Paper, multilingual (TED-8) experiments: fairseq `transformer_iwslt_de_en`.
    "transformer_iwslt_de_en": _transformer(layers=6, heads=4, d_model=512, ffn=1024, dropout=0.3, max_positions=1024),
    # Paper, multi-domain experiments: fairseq `transformer` (base).
    "transformer_base": _transformer(layers=6, heads=8, d_model=512, ffn=2048, dropout=0.1, max_positions=1024),
    # Learns within minutes on a couple of CPU cores (bundled-data demos).
    "small": _transformer(layers=3, heads=4, d_model=256, ffn=1024, dropout=0.1, max_positions=256),
    # Unit tests only.
    "tiny": _transformer(layers=1, heads=2, d_model=32, ffn=64, dropout=0.1, max_positions=128),
}

#: ``M2M100Config`` keyword arguments of published architectures, built with random weights (no download), so that
#: a benchmark measures costs at their size. The vocabulary is the architecture's own, not the tokenizer's
#: (whose ids must fit in it): a 256K-entry output layer is what such a model pays for at every target position.
ARCHITECTURE_PRESETS: dict[str, dict[str, Any]] = {
    # facebook/nllb-200-distilled-600M's config.json (M2M100, pre-norm, 615M parameters).
    "nllb-600m-config": {
        "vocab_size": 256206, "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
        "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
        "decoder_ffn_dim": 4096, "activation_function": "relu", "dropout": 0.1, "attention_dropout": 0.1,
        "activation_dropout": 0.0, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "scale_embedding": True,
        "max_position_embeddings": 1024, "init_std": 0.02,
    },
}

_DEFAULT_NUM_BEAMS = 4
_DEFAULT_GENERATION_MAX_LENGTH = 256


def build_model(
    preset_or_path: str,
    tokenizer: PreTrainedTokenizerBase,
    *,
    num_beams: int | None = None,
    max_length: int | None = None,
    lora: dict | None = None,
    **overrides: Any,
) -> PreTrainedModel:
    """A randomly initialised ``MarianMTModel`` from a preset, or a pretrained seq2seq model.

    Args:
        preset_or_path: a key of :data:`MODEL_PRESETS`, a local model directory (``save_pretrained``
            output) or a Hub id ``org/name``. Remote code is never executed.
        tokenizer: sets the vocabulary size and the pad/EOS ids of a preset model; a pretrained model
            whose vocabulary is smaller than ``len(tokenizer)`` (added language tags) is resized.
        num_beams, max_length: generation defaults stored in ``model.generation_config``. For a preset
            they default to 4 beams and ``min(256, max_position_embeddings)`` tokens; for a pretrained
            model its own generation config is kept unless they are given.
        **overrides: ``MarianConfig`` fields (e.g. ``dropout=0.2``) on top of the preset (``M2M100Config`` fields
            for an :data:`ARCHITECTURE_PRESETS` entry), or config
            attributes passed to ``from_pretrained``.
        lora: ``peft.LoraConfig`` fields: train a LoRA adapter (decoder-only models only).

    A decoder-only preset or checkpoint (:func:`~uat_hf.models.causal_presets.is_causal_checkpoint`) is built by
    :func:`~uat_hf.models.causal_presets.build_causal_model`; its generation length is counted in new tokens at
    translation time, so ``max_length`` is not set on it.
    """
    if is_causal_checkpoint(preset_or_path):
        model = build_causal_model(preset_or_path, tokenizer, lora=lora, **overrides)
        if num_beams is not None:
            model.generation_config.num_beams = num_beams
        return model
    if lora:
        raise ValueError(f"lora is supported for decoder-only models; {preset_or_path!r} is a seq2seq model (wrap it "
                         "with peft.get_peft_model yourself, see docs/distributed.md).")
    if preset_or_path in MODEL_PRESETS or preset_or_path in ARCHITECTURE_PRESETS:
        model = _model_from_preset(preset_or_path, tokenizer, overrides)
        num_beams = _DEFAULT_NUM_BEAMS if num_beams is None else num_beams
        max_length = max_length or min(_DEFAULT_GENERATION_MAX_LENGTH, model.config.max_position_embeddings)
    elif Path(preset_or_path).is_dir() or is_hub_id(preset_or_path):
        model = _pretrained_model(preset_or_path, tokenizer, overrides)
    else:
        raise ValueError(
            f"Unknown model {preset_or_path!r}: not a preset ({sorted(MODEL_PRESETS)}, or with random weights "
            f"{sorted(ARCHITECTURE_PRESETS)}), not a local model directory, "
            "and not a Hub id of the form 'org/name'."
        )
    if num_beams is not None:
        model.generation_config.num_beams = num_beams
    if max_length is not None:
        model.generation_config.max_length = max_length
    return model


def _model_from_preset(preset: str, tokenizer: PreTrainedTokenizerBase, overrides: dict[str, Any]) -> PreTrainedModel:
    if tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
        raise ValueError("The tokenizer needs a pad and an EOS token to build a translation model from a preset.")
    from transformers import (
        GenerationConfig,
        M2M100Config,
        M2M100ForConditionalGeneration,
        MarianConfig,
        MarianMTModel,
    )

    special_ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "forced_eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
    }
    if preset in ARCHITECTURE_PRESETS:
        config_class, model_class, fields = M2M100Config, M2M100ForConditionalGeneration, ARCHITECTURE_PRESETS[preset]
        special_ids["decoder_start_token_id"] = tokenizer.eos_token_id  # M2M100/NLLB convention
    else:
        vocab_size = len(tokenizer)
        config_class, model_class, fields = MarianConfig, MarianMTModel, MODEL_PRESETS[preset]
        special_ids.update(vocab_size=vocab_size, decoder_vocab_size=vocab_size,
                           decoder_start_token_id=tokenizer.pad_token_id)  # Marian convention
    unknown = sorted(set(overrides) - set(config_class.__dataclass_fields__))
    if unknown:
        raise ValueError(f"Unknown {config_class.__name__} fields {unknown} in build_model overrides.")
    fields = {**fields, **special_ids, **overrides}
    if fields["vocab_size"] < len(tokenizer):
        raise ValueError(f"Preset {preset!r} has {fields['vocab_size']} vocabulary entries, fewer than the "
                         f"tokenizer's {len(tokenizer)}; use a smaller tokenizer.")
    config = config_class(**fields)
    model = model_class(config)
    model.generation_config = GenerationConfig.from_model_config(config)
    return model


def _pretrained_model(path: str, tokenizer: PreTrainedTokenizerBase, overrides: dict[str, Any]) -> PreTrainedModel:
    if overrides.pop("trust_remote_code", False):
        raise ValueError("build_model never runs remote code; use a model that transformers supports natively.")
    from transformers import AutoModelForSeq2SeqLM

    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=False, **overrides)
    except OSError as error:
        if is_hub_unreachable(error):
            raise HubUnavailableError(hub_unavailable_message("model", path, None)) from error
        raise
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer))
    return model
