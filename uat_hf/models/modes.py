"""How measuring runs a model without touching training: its device, whether it is sharded, its modes put back,
and dropout drawn from a private seeded RNG.

Measuring (a reward's Monte Carlo dropout passes, a health check) happens between training steps: it must leave
every module's train/eval mode as it found it (:func:`restored_modes`), draw its dropout masks from a forked RNG
so that the training stream and a resumed run are unchanged (:func:`dropout_active`), and, on a model sharded
across ranks (:func:`sharding`), run the same forwards on every rank.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["dropout_active", "model_device", "private_rng", "restored_modes", "sharding"]


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


