"""The corpus scorer ψ of MultiUAT: a plain vector of N logits, p = softmax(ψ).

As in the authors' released code (and MultiDDS-S, which it inherits from) the scorer has no network and
no input: it is one learnable logit per corpus, trained by REINFORCE on the exact expectation over
corpora. Each update minimises ::

    loss(ψ) = - Σ_n R(n) · log softmax(ψ)_n

for ``steps`` Adam steps (200 in the paper, lr 1e-4). Its gradient is ``(Σ_m R(m)) · p - R``, so for
positive rewards the unique fixed point is ``p = R / Σ R``; with the small learning rate p only drifts
toward it, which is what makes the sampling distribution change smoothly during training. One Adam
optimizer lives for the whole training, as in the authors' code, and its state is part of
:meth:`CorpusScorer.state_dict` so a resumed run continues bit for bit.

Everything runs in float64 on the CPU on a private tensor with ``torch.optim.Adam`` (``foreach`` and
``fused`` off), without touching any global random state, so equal inputs give bit-identical outputs.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from .priors import validate_probabilities

__all__ = ["CorpusScorer", "NonFiniteRewardError"]

_STATE_FORMAT = 1
#: fit_to_prior stops once MSE(softmax(ψ), q) is at or below this (an RMS error of 1e-14: round-off).
FIT_TOLERANCE = 1e-28


@contextlib.contextmanager
def _scorer_grad_mode() -> Iterator[None]:
    """Autograd on, inference mode off: the callback may call the scorer under ``torch.no_grad()`` or
    ``torch.inference_mode()``, and tensors created in inference mode could not take part in backward."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


class NonFiniteRewardError(ValueError):
    """A reward given to :meth:`CorpusScorer.update` was NaN or infinite; the scorer was left unchanged.

    ``corpora`` maps each offending corpus name to its reward value.
    """

    def __init__(self, corpora: Mapping[str, float]):
        self.corpora = dict(corpora)
        super().__init__(
            "Non-finite reward for corpora "
            + ", ".join(f"{name!r} ({value})" for name, value in self.corpora.items())
            + "; the scorer update was skipped and its state left unchanged."
        )


class CorpusScorer:
    """Learned distribution over named corpora: ``probabilities = softmax(ψ)``.

    Args:
        names: corpus names, in the order used by reward sequences and by :attr:`probabilities`.
        prior: initial distribution q over ``names`` (e.g. :func:`uat_hf.priors.temperature_prior`);
            every entry must be > 0 because a finite logit cannot represent probability 0.
        lr: Adam learning rate of the updates (paper: 1e-4).
        steps: Adam steps per :meth:`update` (paper: 200).
        betas: Adam betas.
    """

    def __init__(
        self,
        names: Sequence[str],
        prior: Sequence[float],
        *,
        lr: float = 1e-4,
        steps: int = 200,
        betas: Sequence[float] = (0.9, 0.999),
    ):
        self.names: list[str] = [str(n) for n in names]
        if not self.names:
            raise ValueError("CorpusScorer needs at least one corpus name.")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"Corpus names must be unique, got {self.names}.")
        self.lr, self.steps, self.betas = self._check_hparams(lr, steps, betas)
        self._prior = self._check_prior(prior)
        with _scorer_grad_mode():
            self._psi = torch.zeros(len(self.names), dtype=torch.float64, requires_grad=True)
        self._optimizer = self._new_optimizer()
        self.update_count: int = 0
        self.fit_to_prior()

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _check_hparams(lr: float, steps: int, betas: Sequence[float]) -> tuple[float, int, tuple[float, float]]:
        lr = float(lr)
        if not (math.isfinite(lr) and lr >= 0):
            raise ValueError(f"Scorer learning rate must be finite and >= 0, got {lr}.")
        if int(steps) != steps or steps < 0:
            raise ValueError(f"Scorer steps must be a non-negative integer, got {steps}.")
        betas = tuple(float(b) for b in betas)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Scorer betas must be two numbers in [0, 1), got {betas}.")
        return lr, int(steps), betas  # type: ignore[return-value]

    def _check_prior(self, prior: Sequence[float]) -> np.ndarray:
        q = validate_probabilities(prior, self.names)
        zero = [name for name, value in zip(self.names, q) if value <= 0]
        if zero:
            raise ValueError(
                f"Prior probability is 0 for corpora {zero}; the scorer's logits cannot represent 0 "
                "(drop those corpora instead)."
            )
        return q

    def _new_optimizer(self) -> torch.optim.Adam:
        return torch.optim.Adam([self._psi], lr=self.lr, betas=self.betas, foreach=False, fused=False)

    def _minimise(self, loss_fn, optimizer: torch.optim.Optimizer, steps: int, tolerance: float | None = None) -> int:
        """Run up to ``steps`` optimizer steps on ``loss_fn()``; stop early once the loss is <= tolerance.

        Must be called inside :func:`_scorer_grad_mode`. Returns the number of steps taken.
        """
        for step in range(steps):
            optimizer.zero_grad(set_to_none=True)
            value = loss_fn()
            if tolerance is not None and value.item() <= tolerance:
                return step
            value.backward()
            optimizer.step()
        return steps

    # ------------------------------------------------------------------ API
    @property
    def prior(self) -> np.ndarray:
        """The prior the scorer was fitted to (float64 copy)."""
        return self._prior.copy()

    @property
    def logits(self) -> np.ndarray:
        """ψ as a float64 array (copy)."""
        return self._psi.detach().numpy().copy()

    @property
    def probabilities(self) -> np.ndarray:
        """softmax(ψ) as float64, renormalised so it sums to 1."""
        p = torch.softmax(self._psi.detach(), dim=0).numpy().astype(np.float64)
        return p / p.sum()

    def fit_to_prior(self, prior: Sequence[float] | None = None, *, start: Sequence[float] | None = None) -> float:
        """Fit ψ to the prior q by minimising MSE(softmax(ψ), q) with Adam, as the authors do before the first update.

        The authors run this fit from an arbitrary ψ. By default we start from ψ = log q instead, which
        is already the exact minimiser (softmax(log q) = q up to round-off, MSE ~ 1e-33), so the Adam loop
        -- up to ``steps`` steps with lr ``lr``, stopping as soon as MSE <= :data:`FIT_TOLERANCE` -- takes
        no step at all and p starts *exactly* at the prior. The early stop matters: near the minimum the
        gradient is round-off sized, Adam's ``eps`` then turns it into a plain gradient step with an
        effective learning rate of lr/eps = 1e4, and the iterates blow the 1e-17 error up to ~1e-9 within
        a few steps; running the authors' fixed 200 steps from log q would only add that noise.

        The fit uses its own throw-away Adam; the optimizer of :meth:`update` is reset to a fresh one
        (this is meant to run before the first update; ``update_count`` is kept).

        Args:
            prior: a new prior to fit to (validated like the constructor's); default: the current one.
            start: initial logits for the fit (default ``log q``); mainly to reproduce the authors' fit.

        Returns the final MSE.
        """
        if prior is not None:
            self._prior = self._check_prior(prior)
        with _scorer_grad_mode():
            q = torch.as_tensor(self._prior, dtype=torch.float64)
            if start is None:
                init = torch.log(q)
            else:
                init = torch.as_tensor([float(v) for v in start], dtype=torch.float64)
                if init.shape != q.shape or not torch.isfinite(init).all():
                    raise ValueError(f"start must be {q.numel()} finite logits, got {list(start)}.")
            with torch.no_grad():
                self._psi.copy_(init)
            fit_optimizer = torch.optim.Adam([self._psi], lr=self.lr, betas=self.betas, foreach=False, fused=False)

            def mse() -> torch.Tensor:
                return torch.mean((torch.softmax(self._psi, dim=0) - q) ** 2)

            self._minimise(mse, fit_optimizer, self.steps, tolerance=FIT_TOLERANCE)
            self._optimizer = self._new_optimizer()
            with torch.no_grad():
                return float(mse())

    def update(self, rewards: Sequence[float] | Mapping[str, float]) -> np.ndarray:
        """One REINFORCE update with rewards R(n) (higher = corpus needs more batches); returns the new p.

        Minimises ``-Σ_n R(n) log softmax(ψ)_n`` (the exact expectation over corpora: no sampling, no
        baseline) for ``steps`` Adam steps with learning rate ``lr``. Rewards may be any finite numbers;
        for positive rewards p drifts toward ``R / Σ R``.

        Args:
            rewards: one value per corpus, as a sequence in :attr:`names` order or a mapping name -> value
                with exactly the scorer's names.

        Raises:
            NonFiniteRewardError: some reward is NaN/inf. ψ, the optimizer and ``update_count`` are unchanged.
            ValueError: wrong number of rewards or wrong names.
        """
        r = self._rewards_array(rewards)
        bad = {name: float(value) for name, value in zip(self.names, r) if not math.isfinite(value)}
        if bad:
            raise NonFiniteRewardError(bad)
        with _scorer_grad_mode():
            reward = torch.as_tensor(r, dtype=torch.float64)
            self._minimise(lambda: -(reward * torch.log_softmax(self._psi, dim=0)).sum(), self._optimizer, self.steps)
        self.update_count += 1
        return self.probabilities

    def _rewards_array(self, rewards: Sequence[float] | Mapping[str, float]) -> np.ndarray:
        if isinstance(rewards, Mapping):
            keys = [str(k) for k in rewards]
            missing = [n for n in self.names if n not in keys]
            extra = [k for k in keys if k not in self.names]
            if missing or extra:
                raise ValueError(
                    f"Rewards must name exactly the scorer's corpora {self.names}; missing {missing}, unknown {extra}."
                )
            by_name = {str(k): v for k, v in rewards.items()}
            values = [by_name[n] for n in self.names]
        else:
            values = list(rewards)
            if len(values) != len(self.names):
                raise ValueError(f"Got {len(values)} rewards for {len(self.names)} corpora {self.names}.")
        try:
            return np.asarray([float(v) for v in values], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Rewards must be numbers, got {values!r}.") from exc

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (plain lists, floats, ints, strings).

        Holds ψ, the prior, the hyperparameters, ``update_count`` and the Adam state of the update
        optimizer (``step``, ``exp_avg``, ``exp_avg_sq``; ``None`` before the first update). Python's
        ``json`` writes floats with ``repr``, which round-trips float64 exactly, so a scorer restored with
        :meth:`load_state_dict` continues bit-identically.
        """
        adam = None
        state = self._optimizer.state.get(self._psi)
        if state:
            adam = {
                "step": int(float(state["step"])),
                "exp_avg": [float(v) for v in state["exp_avg"].tolist()],
                "exp_avg_sq": [float(v) for v in state["exp_avg_sq"].tolist()],
            }
        return {
            "format": _STATE_FORMAT,
            "names": list(self.names),
            "logits": [float(v) for v in self._psi.detach().tolist()],
            "prior": [float(v) for v in self._prior.tolist()],
            "lr": self.lr,
            "steps": self.steps,
            "betas": list(self.betas),
            "update_count": int(self.update_count),
            "adam": adam,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (also after a JSON round trip).

        The corpus names must be the same, in the same order. ``lr``, ``steps`` and ``betas`` are taken
        from the state (not from the constructor) so that the resumed run is the same run.
        """
        with _scorer_grad_mode():  # no inference tensors in ψ or the Adam state, whatever the caller's mode
            self._load_state_dict(state)

    def _load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = [k for k in ("names", "logits", "lr", "steps", "update_count") if k not in state]
        if missing:
            raise ValueError(f"Scorer state is missing keys {missing}.")
        names = [str(n) for n in state["names"]]
        if names != self.names:
            raise ValueError(
                f"Scorer state is for corpora {names}, but this scorer has {self.names}; "
                "the names (and their order) must match."
            )
        n = len(self.names)

        def vector(key: str, values: Any) -> torch.Tensor:
            t = torch.as_tensor([float(v) for v in values], dtype=torch.float64)
            if t.numel() != n or not torch.isfinite(t).all():
                raise ValueError(f"Scorer state {key!r} must hold {n} finite numbers, got {list(values)}.")
            return t

        logits = vector("logits", state["logits"])
        lr, steps, betas = self._check_hparams(state["lr"], state["steps"], state.get("betas", self.betas))
        prior = self._prior
        if state.get("prior") is not None:
            self._check_prior(state["prior"])
            prior = np.asarray(state["prior"], dtype=np.float64)  # as saved, bit for bit (no renormalisation)
        adam = state.get("adam")
        adam_tensors = None
        if adam is not None:
            adam_tensors = (int(adam["step"]), vector("adam.exp_avg", adam["exp_avg"]), vector("adam.exp_avg_sq", adam["exp_avg_sq"]))

        # Everything validated: now mutate.
        self.lr, self.steps, self.betas, self._prior = lr, steps, betas, prior
        with torch.no_grad():
            self._psi.copy_(logits)
        self._optimizer = self._new_optimizer()
        if adam_tensors is not None:
            step, exp_avg, exp_avg_sq = adam_tensors
            opt_state = self._optimizer.state_dict()
            opt_state["state"] = {0: {"step": torch.tensor(float(step)), "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}}
            self._optimizer.load_state_dict(opt_state)
        self.update_count = int(state["update_count"])

    def __repr__(self) -> str:
        probs = ", ".join(f"{n}={p:.4f}" for n, p in zip(self.names, self.probabilities))
        return f"CorpusScorer({probs}; lr={self.lr}, steps={self.steps}, updates={self.update_count})"
