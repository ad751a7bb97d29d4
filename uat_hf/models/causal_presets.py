"""Decoder-only models for ``uat-train`` / ``uat-evaluate``: presets built from a config, pretrained checkpoints
and LoRA adapters, told apart from seq2seq models by their config.

``causal-tiny`` and ``causal-small`` are randomly initialised ``LlamaConfig`` models sized from the tokenizer,
for tests and for users without network; a directory or Hub id whose config transformers maps to a causal
LM (Qwen2.5-0.5B-Instruct, Llama, Mistral ...) is loaded pretrained. ``lora`` wraps either in a peft LoRA
adapter (``task_type`` causal LM), whose saved folder (``adapter_config.json``) :func:`load_causal_model`
loads back with its base model, merged, for evaluation.

Llama-style models have one dropout field, ``attention_dropout``; the presets set it to 0.1 so that MultiUAT's
Monte Carlo dropout measures something. A pretrained model with every rate 0 can be measured through
``lora.lora_dropout`` or ``model_overrides: {attention_dropout: 0.1}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..utils.hub_errors import is_hub_id

if TYPE_CHECKING:  # the model classes import torch: only the functions that build or read a model load them
    from transformers import PreTrainedTokenizerBase

__all__ = ["CAUSAL_PRESETS", "build_causal_model", "is_causal_checkpoint", "load_causal_model"]

#: ``LlamaConfig`` keyword arguments per causal preset (vocabulary and special ids come from the tokenizer).
CAUSAL_PRESETS: dict[str, dict[str, Any]] = {
    # Unit tests and the offline recipe's smoke runs.
    "causal-tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, attention_dropout=0.1, max_position_embeddings=256),
    # Learns the bundled data within minutes on a few CPU cores.
    "causal-small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=4, attention_dropout=0.1, max_position_embeddings=512),
}

_ADAPTER_CONFIG = "adapter_config.json"


def is_causal_checkpoint(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a decoder-only model: a causal preset, a saved LoRA adapter of a causal
    LM, or a directory / Hub id whose config transformers maps to a ``*ForCausalLM`` and is not
    encoder-decoder (read from ``config.json`` only, no weights)."""
    if name_or_path in CAUSAL_PRESETS:
        return True
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    adapter = Path(name_or_path) / _ADAPTER_CONFIG
    if adapter.is_file():
        return json.loads(adapter.read_text(encoding="utf-8")).get("task_type") == "CAUSAL_LM"
    if not Path(name_or_path).is_dir() and not is_hub_id(name_or_path):
        return False
    try:
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=False)
    except (OSError, ValueError):
        return False  # the seq2seq loader reports what is wrong with it
    return (not getattr(config, "is_encoder_decoder", False)
            and config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
            and "ForConditionalGeneration" not in " ".join(config.architectures or []))


def build_causal_model(name_or_path: str, tokenizer: PreTrainedTokenizerBase, *, lora: dict | None = None,
                       **overrides: Any):
    """A causal preset (random weights, sized from ``tokenizer``) or a pretrained causal LM, optionally LoRA.

    ``overrides``: ``LlamaConfig`` fields for a preset, config attributes for a pretrained model. ``lora``:
    ``peft.LoraConfig`` fields (``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules`` ...).
    """
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from .causal_lm import is_causal_lm

    if tokenizer.eos_token_id is None:
        raise ValueError("A causal LM ends its translation with EOS, but the tokenizer has no eos_token.")
    if name_or_path in CAUSAL_PRESETS:
        unknown = sorted(set(overrides) - set(LlamaConfig().to_dict()))
        if unknown:
            raise ValueError(f"Unknown LlamaConfig fields {unknown} in model_overrides of {name_or_path!r}.")
        config = LlamaConfig(**{**CAUSAL_PRESETS[name_or_path], **overrides}, vocab_size=len(tokenizer),
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                             bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True)
        model = LlamaForCausalLM(config)
    else:
        model = AutoModelForCausalLM.from_pretrained(name_or_path, trust_remote_code=False, **overrides)
        if len(tokenizer) > model.get_input_embeddings().num_embeddings:
            model.resize_token_embeddings(len(tokenizer))
    if tokenizer.pad_token_id is None:  # Llama tokenizers have none: padding is masked, any id does
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if lora:
        peft = _peft()
        model = peft.get_peft_model(model, peft.LoraConfig(**{"task_type": "CAUSAL_LM", **lora}))
    if not is_causal_lm(model):
        raise ValueError(f"{name_or_path!r} loaded as {type(model).__name__}, which is not a causal LM uat_hf "
                         "supports.")
    return model


def load_causal_model(path: str):
    """A saved causal LM, or a saved LoRA adapter loaded with its base model and merged (for evaluation)."""
    if (Path(path) / _ADAPTER_CONFIG).is_file():
        return _peft().AutoPeftModelForCausalLM.from_pretrained(path).merge_and_unload()
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, trust_remote_code=False)


def _peft():
    """peft, an optional extra: only LoRA needs it."""
    try:
        import peft
    except ImportError as error:
        raise ImportError("LoRA adapters need peft: pip install \"uat-hf[peft]\".") from error
    return peft
