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

Everything runs in float64 NumPy with the closed-form gradients and ``torch.optim.Adam``'s update rule,
without touching any global random state, so equal inputs give bit-identical outputs. Autograd and a torch
optimizer would do the same arithmetic for an N-vector at ~20× the cost: 200 steps took ~65 ms, a fixed
cost paid at every balancing update on every rank (a GPU training step of a small model is ~20 ms).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .priors import validate_probabilities

__all__ = ["CorpusScorer", "NonFiniteRewardError"]

_STATE_FORMAT = 1
#: fit_to_prior stops once MSE(softmax(ψ), q) is at or below this (an RMS error of 1e-14: round-off).
FIT_TOLERANCE = 1e-28


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max())
    return z / z.sum()


class _Adam:
    """``torch.optim.Adam``'s update (no weight decay, no AMSGrad, eps 1e-8) on a float64 vector, in place."""

    def __init__(self, lr: float, betas: tuple[float, float], eps: float = 1e-8) -> None:
        self.lr, self.betas, self.eps = lr, betas, eps
        self.step_count = 0
        self.exp_avg: np.ndarray | None = None
        self.exp_avg_sq: np.ndarray | None = None

    def step(self, param: np.ndarray, grad: np.ndarray) -> None:
        beta1, beta2 = self.betas
        if self.exp_avg is None:
            self.exp_avg, self.exp_avg_sq = np.zeros_like(param), np.zeros_like(param)
        self.step_count += 1
        self.exp_avg += (grad - self.exp_avg) * (1 - beta1)
        self.exp_avg_sq *= beta2
        self.exp_avg_sq += (1 - beta2) * grad * grad
        step_size = self.lr / (1 - beta1 ** self.step_count)
        denom = np.sqrt(self.exp_avg_sq) / math.sqrt(1 - beta2 ** self.step_count) + self.eps
        param -= step_size * self.exp_avg / denom


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
        self._psi = np.zeros(len(self.names), dtype=np.float64)
        self._optimizer = _Adam(self.lr, self.betas)
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

    def _minimise(self, loss_and_grad: Callable[[np.ndarray], tuple[float, np.ndarray]], optimizer: _Adam,
                  steps: int, tolerance: float | None = None) -> int:
        """Run up to ``steps`` Adam steps on ψ; stop early once the loss is <= tolerance. Returns the steps taken."""
        for step in range(steps):
            loss, grad = loss_and_grad(self._psi)
            if tolerance is not None and loss <= tolerance:
                return step
            optimizer.step(self._psi, grad)
        return steps

    # ------------------------------------------------------------------ API
    @property
    def prior(self) -> np.ndarray:
        """The prior the scorer was fitted to (float64 copy)."""
        return self._prior.copy()

    @property
    def logits(self) -> np.ndarray:
        """ψ as a float64 array (copy)."""
        return self._psi.copy()

    @property
    def probabilities(self) -> np.ndarray:
        """softmax(ψ) as float64, renormalised so it sums to 1."""
        p = _softmax(self._psi)
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
        q = self._prior
        if start is None:
            init = np.log(q)
        else:
            init = np.asarray([float(v) for v in start], dtype=np.float64)
            if init.shape != q.shape or not np.isfinite(init).all():
                raise ValueError(f"start must be {q.size} finite logits, got {list(start)}.")
        self._psi[:] = init

        def mse(psi: np.ndarray) -> tuple[float, np.ndarray]:
            p = _softmax(psi)
            d = 2.0 * (p - q) / q.size  # d MSE / d p
            return float(np.mean((p - q) ** 2)), p * (d - np.dot(p, d))  # chain rule through the softmax

        self._minimise(mse, _Adam(self.lr, self.betas), self.steps, tolerance=FIT_TOLERANCE)
        self._optimizer = _Adam(self.lr, self.betas)
        return mse(self._psi)[0]

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
        total = r.sum()
        # d/dψ of -Σ R(n) log softmax(ψ)_n is (Σ R)·p - R; the loss value itself is never needed.
        self._minimise(lambda psi: (0.0, total * _softmax(psi) - r), self._optimizer, self.steps)
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
        if self._optimizer.exp_avg is not None:
            adam = {
                "step": int(self._optimizer.step_count),
                "exp_avg": [float(v) for v in self._optimizer.exp_avg.tolist()],
                "exp_avg_sq": [float(v) for v in self._optimizer.exp_avg_sq.tolist()],
            }
        return {
            "format": _STATE_FORMAT,
            "names": list(self.names),
            "logits": [float(v) for v in self._psi.tolist()],
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

        def vector(key: str, values: Any) -> np.ndarray:
            t = np.asarray([float(v) for v in values], dtype=np.float64)
            if t.size != n or not np.isfinite(t).all():
                raise ValueError(f"Scorer state {key!r} must hold {n} finite numbers, got {list(values)}.")
            return t

        logits = vector("logits", state["logits"])
        lr, steps, betas = self._check_hparams(state["lr"], state["steps"], state.get("betas", self.betas))
        prior = self._prior
        if state.get("prior") is not None:
            self._check_prior(state["prior"])
            prior = np.asarray(state["prior"], dtype=np.float64)  # as saved, bit for bit (no renormalisation)
        adam = state.get("adam")
        adam_state = None
        if adam is not None:
            adam_state = (int(adam["step"]), vector("adam.exp_avg", adam["exp_avg"]), vector("adam.exp_avg_sq", adam["exp_avg_sq"]))

        # Everything validated: now mutate.
        self.lr, self.steps, self.betas, self._prior = lr, steps, betas, prior
        self._psi = logits
        self._optimizer = _Adam(self.lr, self.betas)
        if adam_state is not None:
            self._optimizer.step_count, self._optimizer.exp_avg, self._optimizer.exp_avg_sq = adam_state
        self.update_count = int(state["update_count"])

    def __repr__(self) -> str:
        probs = ", ".join(f"{n}={p:.4f}" for n, p in zip(self.names, self.probabilities))
        return f"CorpusScorer({probs}; lr={self.lr}, steps={self.steps}, updates={self.update_count})"
