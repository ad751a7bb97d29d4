"""What every balancing reward shares: the interface, and how it runs the model.

A reward is computed in *shares*: each rank does its part of the work and returns partial sums; the
callback sums them over ranks (one all-reduce) and calls :meth:`BalancingReward.finalize`, which is the
same on every rank. On one process the share is the whole.

The helpers here are the model side both rewards use: which label positions are scored
(:func:`scored_mask`: real target tokens, not the language code that opens the labels under NLLB, M2M100
or mBART-50), the logits at those positions only (:func:`target_logits`), and passes whose dropout masks
come from a forked, seeded RNG with every module's mode restored afterwards (:func:`dropout_active`), so
that measuring never perturbs training and a resumed run measures the same. They take the model the
Trainer trains, which may be a peft (LoRA) model or sharded across ranks (:func:`sharding`); it must be
encoder-decoder or a causal LM (:func:`require_supported_model`). The rewards themselves:
:class:`~uat_hf.strategies.multiuat.uncertainty.UncertaintyReward` (MultiUAT) and
:class:`~uat_hf.strategies.multidds_s.gradient_cosine.GradientCosineReward` (MultiDDS-S).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..models.causal_lm import causal_target_logits, is_causal_lm
from ..utils.columns import MODEL_COLUMNS
from .multiuat.measures import IGNORE_INDEX, position_statistics

__all__ = [
    "BalancingReward",
    "dropout_active",
    "model_device",
    "private_rng",
    "require_supported_model",
    "restored_modes",
    "scored_mask",
    "sharding",
    "target_logits",
    "target_statistics",
]

#: Model types whose logits are ``lm_head(decoder hidden state) [+ final_logits_bias]``: for them the output
#: layer can be applied to real target positions only.
_HEAD_ON_HIDDEN_TYPES = {"marian", "bart", "mbart", "pegasus", "m2m_100", "blenderbot", "blenderbot-small"}

#: Logits :func:`target_statistics` lets live at once (float32: 64 MiB, and log_softmax's few temporaries of it).
STATISTICS_ELEMENTS = 1 << 24


class BalancingReward:
    """Interface of a reward: per-rank partial sums, then one finishing step identical on every rank."""

    needs_train_batches: bool = False

    def compute(
        self,
        model: nn.Module,
        dev_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]],
        train_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]] | None = None,
        *,
        process_index: int = 0,
        num_processes: int = 1,
        seed: int = 0,
    ) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def rewards_over_ranks(
        self,
        model: nn.Module,
        dev_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]],
        train_batches: Sequence[Sequence[Mapping[str, torch.Tensor]]] | None = None,
        *,
        process_index: int,
        num_processes: int,
        seed: Callable[[int], int],
        reduce: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]],
    ) -> tuple[np.ndarray, dict]:
        """The rewards and the record's extra fields: this rank's shares (:meth:`compute`, its randomness seeded by
        ``seed(0)``), summed over the ranks by ``reduce``, finished by :meth:`finalize`. A reward that measures in
        blocks (MultiUAT's adaptive K) overrides it and seeds block b with ``seed(b)``."""
        shares = self.compute(model, dev_batches, train_batches, process_index=process_index,
                              num_processes=num_processes, seed=seed(0))
        return self.finalize(reduce(shares))

    def check_model(self, model: nn.Module, accelerator: Any = None) -> None:
        """Refuse, before training starts, a model this reward cannot measure (``accelerator``: the Trainer's,
        which shows sharding the model will get at ``prepare``): here, one that is neither encoder-decoder nor a
        causal LM (:func:`require_supported_model`); subclasses add their own refusals."""
        require_supported_model(model)

    def finalize(self, totals: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict]:
        """Rewards per corpus (and extra fields for the history record) from the rank-summed shares."""
        raise NotImplementedError


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


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def sharding(model: nn.Module, accelerator: Any = None) -> str | None:
    """``"FSDP"`` or ``"DeepSpeed ZeRO-3"`` when the model's parameters are sharded across ranks, else ``None``.

    Why it matters: a sharded model gathers its parameters in every forward pass, a collective that all ranks
    must join, so the rewards must run the same number of forwards on every rank and call the model as a
    whole. Read from the model (FSDP1 wrappers, FSDP2 ``fully_shard`` modules, DTensor parameters, ZeRO-3's
    ``ds_id`` on parameters) and, when given, from the ``accelerate.Accelerator`` that will wrap it (before
    ``prepare`` the model itself does not show it yet).
    """
    from torch.distributed import fsdp

    sharded_types = tuple(getattr(fsdp, name) for name in ("FullyShardedDataParallel", "FSDPModule")
                          if hasattr(fsdp, name))
    if any(isinstance(module, sharded_types) for module in model.modules()):
        return "FSDP"
    dtensor = getattr(getattr(torch.distributed, "tensor", None), "DTensor", None)
    for parameter in model.parameters():
        if hasattr(parameter, "ds_id"):
            return "DeepSpeed ZeRO-3"
        if dtensor is not None and isinstance(parameter, dtensor):
            return "FSDP"
    kind = str(getattr(accelerator, "distributed_type", ""))
    if kind.endswith("FSDP"):
        return "FSDP"
    plugin = getattr(getattr(accelerator, "state", None), "deepspeed_plugin", None)
    if kind.endswith("DEEPSPEED") and getattr(plugin, "zero_stage", None) == 3:
        return "DeepSpeed ZeRO-3"
    return None


@contextlib.contextmanager
def restored_modes(model: nn.Module) -> Iterator[None]:
    """Every module's train/eval mode put back exactly as it was on exit, whatever the block changed."""
    modes = [(module, module.training) for module in model.modules()]
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


@contextlib.contextmanager
def private_rng(seed: int) -> Iterator[None]:
    """A forked RNG (CPU and the current CUDA device) seeded with ``seed``: the block draws reproducible
    numbers and the training stream continues afterwards as if the block had not run."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def dropout_active(model: nn.Module, seed: int) -> Iterator[None]:
    """Dropout on as in training, a private seeded RNG, and every module's mode restored exactly after.

    Hugging Face layers gate their functional dropout on ``module.training``, so the modules are put in
    training mode; normalisation layers with running statistics (BatchNorm) stay in eval mode so that
    measuring never updates them. The RNG is forked (CPU and the current CUDA device), so the training
    stream is untouched and a resumed run draws the same masks.
    """
    with restored_modes(model):
        model.train()
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._NormBase):
                module.eval()
        with private_rng(seed):
            yield


def target_logits(model: nn.Module, batch: Mapping[str, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """Logits [M, V] at the M real target positions (``mask``), teacher-forced on the reference prefix.

    Without ``decoder_input_ids`` in the batch (the collator makes them only for models that have
    ``prepare_decoder_input_ids_from_labels``; M2M100 has not) the model is given the labels and shifts them
    with its own decoder-start convention; the base model alone would not (BART's would shift the source).
    A peft model is read through its base model, whose layers carry the adapters. A sharded model
    (:func:`sharding`) is called as a whole: its root gathers the parameters its submodules share, so the
    output layer then runs at every position. A decoder-only model's logits are shifted by one
    (:func:`~uat_hf.models.causal_lm.causal_target_logits`).
    """
    features, head = _target_features(model, batch, mask)
    return head(features)


def target_statistics(model: nn.Module, batch: Mapping[str, torch.Tensor], mask: torch.Tensor,
                      max_elements: int = STATISTICS_ELEMENTS) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~uat_hf.strategies.multiuat.measures.position_statistics` (max probability, entropy) of
    :func:`target_logits`, [M] each,
    with the output layer and the softmax applied to at most ``max_elements`` logits at a time.

    Why: the statistics need two numbers per position, not the logits; log_softmax over a large vocabulary
    (256K for NLLB) at every target position of a replicated batch would hold several [M, V] float32 copies
    at once, more memory than the training step. Each row's numbers are those of the whole-batch computation.
    """
    features, head = _target_features(model, batch, mask)
    width = head.vocabulary if isinstance(head, _OutputLayer) else features.shape[-1]
    rows = max(1, max_elements // max(width, 1))
    parts = [position_statistics(head(features[start:start + rows]))
             for start in range(0, max(features.shape[0], 1), rows)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _target_features(model: nn.Module, batch: Mapping[str, torch.Tensor],
                     mask: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """``(features, head)`` with ``head(features)`` the logits of :func:`target_logits`: the decoder's hidden
    states at ``mask`` and the output layer where it can be applied to them alone, else the logits themselves
    and the identity."""
    if is_causal_lm(model):
        return causal_target_logits(model, batch, mask, whole=sharding(model) is not None), _identity
    if "decoder_input_ids" not in batch:
        inputs = {k: batch[k] for k in MODEL_COLUMNS if k in batch}
        return model(**inputs).logits[mask], _identity
    keys = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")
    inputs = {k: batch[k] for k in keys if k in batch}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft: adapters are in its layers
    head_on_hidden = getattr(base.config, "model_type", None) in _HEAD_ON_HIDDEN_TYPES and hasattr(base, "model")
    if head_on_hidden and sharding(model) is None:
        hidden = base.model(**inputs).last_hidden_state[mask]
        return hidden, _OutputLayer(base)
    return model(**inputs).logits[mask], _identity


class _OutputLayer:
    """The output layer of ``base`` (and its ``final_logits_bias``), applied to hidden states."""

    def __init__(self, base: nn.Module) -> None:
        self.layer = base.get_output_embeddings()
        self.bias = getattr(base, "final_logits_bias", None)
        self.vocabulary = int(self.layer.weight.shape[0])

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.layer(hidden)
        return logits + self.bias[0] if self.bias is not None else logits
