"""MultiDDS-S reward: how well each training corpus's gradient agrees with the dev gradients.

R(j) = mean_i cos(∇θ L(dev_i), ∇θ L(train_j)) (Wang et al., 2020, "Balancing Training for Multilingual
Neural Machine Translation"; the stochastic variant used as a baseline by MultiUAT). Gradients are taken
over every trainable parameter at the current θ, on the fresh small dev and train batches the callback
draws at each update.

Against the two reference codes (multiDDS's ``update_language_sampler_multilin`` and MultiUAT's own
MultiDDS baseline), see ``docs/multidds.md``: the passes run in eval mode (dropout off) as in MultiUAT's
baseline (``dropout=True`` gives multiDDS's train-mode passes); L is the training loss with its label
smoothing (``label_smoothing``, as both references use the training criterion); and one train batch per
corpus serves every dev corpus unless ``per_pair_train_batches=True`` draws a fresh one per (dev, train)
pair as both references do, at N_dev × (1 + N_train) instead of N_dev + N_train passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...models.modes import dropout_active, private_rng, restored_modes, sharding
from ...models.targets import scored_mask, target_logits
from ..rewards import BalancingReward

DEV_SHARING = ("auto", "recompute", "broadcast")


@contextlib.contextmanager
def gradient_mode(model: nn.Module, seed: int, dropout: bool = False) -> Iterator[None]:
    """Autograd on, the model in eval mode (``dropout=False``) or :func:`~uat_hf.models.modes.dropout_active`
    (``dropout=True``), a private seeded RNG; every module's mode and every ``.grad`` reference restored.

    ``.grad`` is not written by the measurement (gradients come from :func:`torch.autograd.grad`); the
    references are still put back afterwards, so even a hook that wrote them cannot leak into training.
    """
    grads = [(p, p.grad) for p in model.parameters()]
    try:
        with restored_modes(model):
            if dropout:
                with dropout_active(model, seed), torch.enable_grad():
                    yield
            else:
                model.eval()
                with private_rng(seed), torch.enable_grad():
                    yield
    finally:
        for p, grad in grads:
            p.grad = grad


def _token_loss_sum(model: nn.Module, batch: Mapping[str, torch.Tensor], label_smoothing: float = 0.0,
                    language_code_ids: Collection[int] = ()) -> torch.Tensor:
    """Summed token cross-entropy of ``batch`` (teacher-forced) at the scored target positions only: real
    tokens, not a leading language code (:func:`~uat_hf.models.targets.scored_mask`).

    With ``label_smoothing`` ε each token's loss is ``(1 - ε)·NLL + ε·mean_v(-log p_v)``, the loss of the
    Trainer's ``label_smoothing_factor`` and of fairseq's ``label_smoothed_cross_entropy``.
    """
    labels = batch["labels"]
    mask = scored_mask(labels, language_code_ids)
    return F.cross_entropy(target_logits(model, batch, mask).float(), labels[mask], reduction="sum",
                           label_smoothing=label_smoothing)


class GradientCosineReward(BalancingReward):
    """MultiDDS-S: R(j) = mean over dev corpora i of cos(∇θ L(dev_i), ∇θ L(train_j)).

    L is the mean token loss of a batch -- cross-entropy with ``label_smoothing`` (pass the training
    run's, as the references differentiate their training criterion) -- and a batch given as several
    sub-batches is one loss, each sub-batch's gradient weighted by its share of the batch's target tokens.
    The measurement leaves parameters, every ``.grad`` (tensor or ``None``), buffers, every module's
    train/eval mode, the optimizer and the training RNG stream exactly as they were (see
    :func:`gradient_mode`).

    Args:
        dev_sharing: how the dev gradients reach every rank (below).
        dropout: ``False`` (default): the passes run in eval mode, so the reward is a deterministic
            function of θ and the batches, as in MultiUAT's MultiDDS baseline. ``True``: dropout on with
            seeded masks, as multiDDS's own code runs them (train mode).
        label_smoothing: ε of the measured loss (the Trainer's ``label_smoothing_factor``).
        per_pair_train_batches: ``False`` (default): ``train_batches[j]`` is one batch of train corpus j,
            used against every dev corpus. ``True``: ``train_batches[i][j]`` is a separate batch of train
            corpus j for dev corpus i, as both reference codes draw them (only entries with
            ``j % num_processes == process_index`` are read; others may be ``None``).
        language_code_ids: the tokenizer's language-code token ids (NLLB, M2M100, mBART-50): a code opening a
            row's labels is left out of every loss (:func:`~uat_hf.models.targets.scored_mask`), as the
            authors never
            score it. Empty (default): every real label position counts.

    Memory: one flat float32 gradient vector per dev corpus on the model's device (N·|θ|·4 bytes), plus one
    for the train gradient being scored and the transient per-parameter gradients of one backward pass. Train
    gradients are computed one at a time and dotted against the stored dev vectors.

    Cost per update: N dev + N train forward/backward passes in total, or N dev + N·N train passes with
    ``per_pair_train_batches`` (the references: N_dev × (1 + N_train), their dev gradient recomputed for
    nothing new). Sharing one train batch across the dev corpora leaves each cosine's expectation unchanged
    (every (dev, train) pair still sees independent fresh batches of its two corpora); it only correlates
    the N terms of a row mean, so R(j) is noisier than with fresh batches. A gradient whose norm is 0 (e.g.
    an empty batch) has cosine 0.

    Distributed runs (the callback sums every returned array over ranks): rank r scores the train corpora
    j with j % P == r and returns the rows j of the N×N matrix (zeros elsewhere), so every entry comes from
    exactly one rank, the others add exact zeros, and the summed matrix, the rewards and p are bit-identical
    on every rank. The dev gradients are needed by every rank; ``dev_sharing`` chooses how they get there:

    * ``recompute``: every rank computes all N dev gradients. No communication, but N + N/P backward
      passes per rank (the N dev passes are duplicated P times).
    * ``broadcast``: rank i % P computes dev gradient i and broadcasts it (``torch.distributed``) to the
      others: 2N/P backward passes per rank plus N broadcasts of |θ| floats. Memory per rank is the same
      (every rank must hold all N dev vectors to score its train rows). Cheaper whenever one backward pass
      costs more than moving |θ| floats, which is the case with NCCL; with gloo on CPU it is about even.
    * ``auto`` (default): ``broadcast`` when a ``torch.distributed`` process group spans exactly the
      ``num_processes`` ranks the callback reports, else ``recompute``.

    With ``dropout=True`` each rank draws its dropout masks from its own seed (the callback seeds by rank),
    so which dropout masks a gradient used depends on P; the result never depends on the rank reading it.

    Gradients come from :func:`torch.autograd.grad`, which neither writes ``.grad`` nor fires
    post-accumulate hooks (optimizer-in-backward setups would otherwise step during measurement). Reentrant
    activation checkpointing (``use_reentrant=True``) does not support it; the Transformers default
    (non-reentrant) does.

    On a peft (LoRA) model the gradients are those of the trainable parameters only, i.e. the adapters: the
    directions training can actually move. Models sharded across ranks (FSDP, DeepSpeed ZeRO-3) are refused
    (:meth:`check_model`, before training and again at each update): their parameters hold a shard and get
    their gradients through reduce-scatter hooks on ``.grad``, which :func:`torch.autograd.grad` bypasses.
    """

    needs_train_batches = True

    def __init__(
        self,
        *,
        dev_sharing: str = "auto",
        dropout: bool = False,
        label_smoothing: float = 0.0,
        per_pair_train_batches: bool = False,
        train_batch_tokens: int = 1024,
        language_code_ids: Collection[int] = (),
    ) -> None:
        if dev_sharing not in DEV_SHARING:
            raise ValueError(f"dev_sharing must be one of {', '.join(DEV_SHARING)}, got {dev_sharing!r}.")
        label_smoothing = float(label_smoothing)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}.")
        self.dev_sharing = dev_sharing
        self.dropout = bool(dropout)
        self.label_smoothing = label_smoothing
        #: The callback reads this to pass ``train_batches[i][j]`` (dev i, train j) instead of ``train_batches[j]``.
        self.per_pair_train_batches = bool(per_pair_train_batches)
        if not int(train_batch_tokens) >= 1:
            raise ValueError(f"train_batch_tokens must be >= 1, got {train_batch_tokens}.")
        #: The callback draws each fresh train batch with this many target tokens.
        self.train_batch_tokens = int(train_batch_tokens)
        self.language_code_ids = frozenset(int(i) for i in language_code_ids)

    def check_model(self, model: nn.Module, accelerator: Any = None) -> None:
        """Refuse a model sharded across ranks, naming the sharding and what to use instead (and, as every
        reward, one that is neither encoder-decoder nor a causal LM)."""
        kind = sharding(model, accelerator)
        if kind is not None:
            raise ValueError(
                f"strategy 'multidds-s' (gradient cosine) does not support a model sharded across ranks ({kind}): it "
                "needs each rank's full gradient, which sharded training never materialises. Train with data "
                "parallelism (DDP: accelerate launch --multi_gpu, without FSDP/ZeRO-3), or use strategy 'multiuat', "
                "which runs under FSDP and ZeRO-3."
            )
        super().check_model(model, accelerator)

    # ------------------------------------------------------------------ gradients
    @staticmethod
    def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
        """Parameters that require grad: all of a fully trained model, only the adapters of a LoRA model."""
        return [p for p in model.parameters() if p.requires_grad]

    @staticmethod
    def flat_gradient(
        model: nn.Module, batches: Sequence[Mapping[str, torch.Tensor]], params: Sequence[nn.Parameter],
        label_smoothing: float = 0.0, language_code_ids: Collection[int] = (),
    ) -> torch.Tensor:
        """∇θ of the batch's mean token cross-entropy as one float32 vector (model mode and autograd as set),
        over the positions :func:`~uat_hf.models.targets.scored_mask` keeps."""
        device = params[0].device
        flat = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32, device=device)
        tokens = sum(int(scored_mask(b["labels"], language_code_ids).sum()) for b in batches)
        if tokens == 0:
            return flat
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            if not bool(scored_mask(batch["labels"], language_code_ids).any()):
                continue
            loss = _token_loss_sum(model, batch, label_smoothing, language_code_ids) / tokens
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            offset = 0
            for p, g in zip(params, grads):
                if g is not None:
                    flat[offset : offset + p.numel()].add_(g.reshape(-1).float())
                offset += p.numel()
            del grads, loss
        return flat

    def _use_broadcast(self, num_processes: int, process_index: int) -> bool:
        if self.dev_sharing == "recompute" or num_processes == 1:
            return False
        ready = (
            torch.distributed.is_available() and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() == num_processes
            and torch.distributed.get_rank() == process_index
        )
        if self.dev_sharing == "broadcast" and not ready:
            raise RuntimeError(
                "dev_sharing='broadcast' needs an initialised torch.distributed process group whose world size and "
                f"rank match the callback's ({num_processes} processes, this is {process_index})."
            )
        return ready

    # ------------------------------------------------------------------ reward interface
    def _check_train_batches(self, train_batches, n: int, mine: Sequence[int]) -> None:
        if train_batches is None:
            raise ValueError("GradientCosineReward needs train batches (needs_train_batches=True).")
        if len(train_batches) != n:
            raise ValueError(f"{len(train_batches)} train batches for {n} dev batches.")
        if self.per_pair_train_batches:
            for i, row in enumerate(train_batches):
                if row is None or len(row) != n or any(row[j] is None for j in mine):
                    raise ValueError(
                        "per_pair_train_batches=True needs train_batches[i][j]: for every dev corpus i a list of "
                        f"{n} train batches (train corpus j); dev corpus {i} has "
                        f"{'none' if row is None else len(row)} (or misses one this rank scores)."
                    )

    def compute(self, model, dev_batches, train_batches=None, *, process_index=0, num_processes=1, seed=0):
        self.check_model(model)
        n = len(dev_batches)
        mine = [j for j in range(n) if j % num_processes == process_index]
        self._check_train_batches(train_batches, n, mine)
        cosine = np.zeros((n, n), dtype=np.float64)
        params = self.trainable_parameters(model)
        if not params:
            raise ValueError("The model has no trainable parameters: MultiDDS-S has no gradient to compare.")
        broadcast = self._use_broadcast(num_processes, process_index)

        def gradient(batches):
            return self.flat_gradient(model, batches, params, self.label_smoothing, self.language_code_ids)

        with gradient_mode(model, seed, self.dropout):
            dev_vectors, dev_norms = [], []
            for i, batches in enumerate(dev_batches):
                owner = i % num_processes
                if broadcast and owner != process_index:
                    vector = torch.empty(sum(p.numel() for p in params), dtype=torch.float32, device=params[0].device)
                else:
                    vector = gradient(batches)
                if broadcast:
                    torch.distributed.broadcast(vector, src=owner)
                dev_vectors.append(vector)
                dev_norms.append(torch.linalg.vector_norm(vector))
            for j in mine:
                if not self.per_pair_train_batches:
                    train = gradient(train_batches[j])
                    train_norm = torch.linalg.vector_norm(train)
                for i, (dev, dev_norm) in enumerate(zip(dev_vectors, dev_norms)):
                    if self.per_pair_train_batches:  # a fresh train batch of corpus j for dev corpus i
                        train = gradient(train_batches[i][j])
                        train_norm = torch.linalg.vector_norm(train)
                    denominator = float(dev_norm) * float(train_norm)
                    value = float(torch.dot(dev, train)) / denominator if denominator > 0 else 0.0
                    cosine[j, i] = min(1.0, max(-1.0, value))
                del train
            del dev_vectors
        return {"cosine": cosine}

    def finalize(self, totals):
        cosine = np.asarray(totals["cosine"], dtype=np.float64)
        rewards = cosine.mean(axis=1)
        return rewards, {"cosine": cosine.tolist(), "cosine_axes": {"rows": "train", "columns": "dev"}}
