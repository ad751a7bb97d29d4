"""The corpus scorer ψ of MultiUAT: a plain vector of N logits, p = softmax(ψ).

As in the authors' released code (and MultiDDS-S, which it inherits from) the scorer has no network and
no input: it is one learnable logit per corpus, trained by REINFORCE on the exact expectation over
corpora. Each update minimises ::

    loss(ψ) = - Σ_n R(n) · log softmax(ψ)_n

for ``steps`` Adam steps (200 in the paper, lr 1e-4). Its gradient is ``(Σ_m R(m)) · p - R``, so for
positive rewards the unique fixed point is ``p = R / Σ R``; with the small learning rate p only drifts
toward it, which is what makes the sampling distribution change smoothly during training.

How ψ starts (``prior_fit``). The paper starts p at the prior q and says no more. The released code
starts ψ at a constant vector (uniform p), fits it to q by minimising ``MSE(softmax(ψ), q)`` with Adam
until the MSE is at most :data:`RELEASED_FIT_TOLERANCE` (1e-8), and then keeps that *same* Adam for every
update. At lr 1e-4 the fit takes some 10k-50k steps for typical priors (more for more corpora and more
skewed q), so the optimizer enters the first update with bias correction ≈ 1 and a second moment that only
remembers the tiny gradients at the end of the fit. Each of its first steps is then about
(1-β1)/√(1-β2) ≈ 3.2 lr instead of a fresh Adam's lr: the first update moves p several times farther than
a fresh Adam would, and the gap closes over ~10 updates as the second moment catches up. That start is
part of the method as its authors ran it, so it is the default, ``prior_fit="released"``.
``prior_fit="exact"`` starts at ψ = log q (p = q to round-off) with a fresh Adam for the updates instead.

One Adam optimizer serves the fit (in ``released`` mode) and every update, and its state is part of
:meth:`CorpusScorer.state_dict`, so a resumed run continues bit for bit.

Everything runs in float64 NumPy with the closed-form gradients and ``torch.optim.Adam``'s update rule
(:class:`uat_hf.strategies.adam.Adam`), without touching any global random state, so equal inputs give bit-identical
outputs. Autograd and a torch optimizer would do the same arithmetic for an N-vector at ~20× the cost, which
matters for the tens of thousands of steps of a released fit; released fits are also cached per (q, start,
lr, betas), so building the same scorer again does not repeat them.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..sampling.priors import validate_probabilities
from ..utils.names import check_exact_names, check_unique_names
from .adam import Adam, softmax

__all__ = ["CorpusScorer", "NonFiniteRewardError", "PRIOR_FITS", "RELEASED_FIT_TOLERANCE"]

#: Version of :meth:`CorpusScorer.state_dict`. 1: ψ = log q and a fresh update Adam (no ``prior_fit`` key);
#: 2: adds ``prior_fit`` and ``fit_steps`` (the Adam state may then be present before the first update).
_STATE_FORMAT = 2
#: How ψ starts: ``released`` (the authors' MSE fit from uniform p, its Adam kept for the updates) or
#: ``exact`` (ψ = log q, a fresh Adam for the updates).
PRIOR_FITS: tuple[str, ...] = ("released", "exact")
#: The released code's stop rule: it keeps stepping while MSE(softmax(ψ), q) > 1e-8 (an RMS error of 1e-4).
RELEASED_FIT_TOLERANCE = 1e-8
#: A released fit that has not met its tolerance after this many Adam steps is reported as an error instead
#: of looping on (the authors' loop has no bound). At lr 1e-4, 13 corpora of sizes 1:2:...:2^12 need ~53k.
RELEASED_FIT_MAX_STEPS = 2_000_000
#: ``exact`` fits stop once MSE(softmax(ψ), q) is at or below this (an RMS error of 1e-14: round-off).
FIT_TOLERANCE = 1e-28

_FIT_CACHE: OrderedDict[tuple, tuple[np.ndarray, int, np.ndarray | None, np.ndarray | None]] = OrderedDict()
_FIT_CACHE_SIZE = 32


def _prior_mse(psi: np.ndarray, q: np.ndarray) -> tuple[float, np.ndarray]:
    """``MSE(softmax(ψ), q)`` (mean over the N entries, as ``torch.nn.functional.mse_loss``) and its gradient."""
    p = softmax(psi)
    r = p - q
    d = r * (2.0 / q.size)  # d MSE / d p
    return float(np.dot(r, r)) / q.size, p * (d - np.dot(p, d))  # chain rule through the softmax


def _released_fit(
    q: np.ndarray, init: np.ndarray, lr: float, betas: tuple[float, float]
) -> tuple[np.ndarray, int, np.ndarray | None, np.ndarray | None]:
    """The authors' prior fit: Adam on MSE(softmax(ψ), q) from ``init`` while the pre-step MSE > 1e-8.

    Returns ψ and the Adam state (step count, exp_avg, exp_avg_sq) the updates continue from.
    """
    psi = init.copy()
    optimizer = Adam(lr, betas)
    loss = math.inf
    while loss > RELEASED_FIT_TOLERANCE:
        if optimizer.step_count >= RELEASED_FIT_MAX_STEPS:
            raise RuntimeError(
                f"The released prior fit did not reach MSE <= {RELEASED_FIT_TOLERANCE} in {RELEASED_FIT_MAX_STEPS} "
                f"Adam steps (lr {lr}, MSE now {loss:.3g}); raise the scorer lr or use prior_fit='exact'."
            )
        loss, grad = _prior_mse(psi, q)
        if lr == 0 and loss > RELEASED_FIT_TOLERANCE:
            raise ValueError(
                "prior_fit='released' fits ψ to the prior with the scorer's Adam, which cannot move with lr=0; "
                "use prior_fit='exact' for a frozen scorer that starts at the prior."
            )
        optimizer.step(psi, grad)
    return psi, optimizer.step_count, optimizer.exp_avg, optimizer.exp_avg_sq


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
        prior: initial distribution q over ``names`` (e.g. :func:`uat_hf.sampling.priors.temperature_prior`);
            every entry must be > 0 because a finite logit cannot represent probability 0. ψ is fitted to it
            once, here, and it is not kept: the prior belongs to the
            :class:`~uat_hf.sampling.distribution.CorpusDistribution` (nothing else may move ψ but :meth:`update`).
        lr: Adam learning rate of the updates, and of the prior fit in ``released`` mode (paper: 1e-4).
        steps: Adam steps per :meth:`update` (paper: 200).
        betas: Adam betas.
        prior_fit: how ψ starts (see the module docstring). ``"released"`` (default): the authors' fit of
            ψ from uniform p to q, Adam on ``MSE(softmax(ψ), q)`` until it is <= 1e-8, and that Adam -- its
            moments and step count -- continues into the updates; p then starts within an RMS error of 1e-4
            of q. ``"exact"``: ψ = log q, so p = q to round-off, and the updates start a fresh Adam.
    """

    def __init__(
        self,
        names: Sequence[str],
        prior: Sequence[float],
        *,
        lr: float = 1e-4,
        steps: int = 200,
        betas: Sequence[float] = (0.9, 0.999),
        prior_fit: str = "released",
    ):
        self.names: list[str] = [str(n) for n in names]
        if not self.names:
            raise ValueError("CorpusScorer needs at least one corpus name.")
        check_unique_names(self.names, "Corpus names must be unique, got {names}.")
        self.lr, self.steps, self.betas = self._check_hparams(lr, steps, betas)
        self.prior_fit = self._check_prior_fit(prior_fit)
        self._psi = np.zeros(len(self.names), dtype=np.float64)
        self._optimizer = Adam(self.lr, self.betas)
        #: Adam steps the prior fit took (the released fit's count carries into the updates).
        self.fit_steps: int = 0
        self._fit_to_prior(self._check_prior(prior))

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

    @staticmethod
    def _check_prior_fit(prior_fit: str) -> str:
        if prior_fit not in PRIOR_FITS:
            raise ValueError(f"prior_fit must be one of {', '.join(PRIOR_FITS)}, got {prior_fit!r}.")
        return prior_fit

    def _check_prior(self, prior: Sequence[float]) -> np.ndarray:
        q = validate_probabilities(prior, self.names)
        zero = [name for name, value in zip(self.names, q) if value <= 0]
        if zero:
            raise ValueError(
                f"Prior probability is 0 for corpora {zero}; the scorer's logits cannot represent 0 "
                "(drop those corpora instead)."
            )
        return q

    def _minimise(self, loss_and_grad: Callable[[np.ndarray], tuple[float, np.ndarray]], optimizer: Adam,
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
    def logits(self) -> np.ndarray:
        """ψ as a float64 array (copy)."""
        return self._psi.copy()

    @property
    def probabilities(self) -> np.ndarray:
        """softmax(ψ) as float64, renormalised so it sums to 1."""
        p = softmax(self._psi)
        return p / p.sum()

    def _fit_to_prior(self, q: np.ndarray, start: Sequence[float] | None = None) -> float:
        """Fit ψ to the (checked) prior q by minimising ``MSE(softmax(ψ), q)`` with Adam; returns the final MSE.

        Runs once, in the constructor: a refit would move ψ behind the back of the distribution that owns p.

        ``prior_fit="released"`` (the authors' ``pretrain_data_actor``): ψ starts at ``start`` (default 0,
        i.e. uniform p: the released actor's logits are a constant vector), a fresh Adam with the scorer's
        ``lr`` and ``betas`` takes steps until the MSE measured before a step is <= 1e-8 -- that last step
        is taken too, as in their ``while loss > 1e-8`` loop -- and the same Adam then serves every
        :meth:`update`. The fit is a pure function of (q, start, lr, betas), so its result is cached.

        ``prior_fit="exact"``: ψ starts at ``start`` (default ``log q``, already the minimiser: MSE ~ 1e-33,
        so no step is taken and p starts *exactly* at q); from another start up to ``steps`` steps of a
        throw-away Adam are taken, stopping once the MSE is <= :data:`FIT_TOLERANCE`. The stop matters near
        the minimum: there the gradient is round-off sized and Adam's ``eps`` turns it into a plain gradient
        step with an effective learning rate of lr/eps, which would blow the 1e-17 error up to ~1e-9. The
        updates then start a fresh Adam.

        Args:
            q: the prior to fit to.
            start: initial logits of the fit.

        Raises:
            ValueError: ``released`` with ``lr == 0`` (the fit could never move) for a non-uniform prior.
            RuntimeError: a ``released`` fit has not reached 1e-8 within :data:`RELEASED_FIT_MAX_STEPS`.
        """
        if start is None:
            init = np.zeros_like(q) if self.prior_fit == "released" else np.log(q)
        else:
            init = np.asarray([float(v) for v in start], dtype=np.float64)
            if init.shape != q.shape or not np.isfinite(init).all():
                raise ValueError(f"start must be {q.size} finite logits, got {list(start)}.")

        if self.prior_fit == "exact":
            self._psi = init.copy()
            self.fit_steps = self._minimise(lambda psi: _prior_mse(psi, q), Adam(self.lr, self.betas), self.steps,
                                            tolerance=FIT_TOLERANCE)
            self._optimizer = Adam(self.lr, self.betas)
            return _prior_mse(self._psi, q)[0]

        key = (q.tobytes(), init.tobytes(), self.lr, self.betas)
        cached = _FIT_CACHE.get(key)
        if cached is None:
            cached = _released_fit(q, init, self.lr, self.betas)
            _FIT_CACHE[key] = cached
            while len(_FIT_CACHE) > _FIT_CACHE_SIZE:
                _FIT_CACHE.popitem(last=False)
        else:
            _FIT_CACHE.move_to_end(key)
        psi, step_count, exp_avg, exp_avg_sq = cached
        self._psi = psi.copy()
        self._optimizer = Adam(self.lr, self.betas)
        self._optimizer.step_count = step_count
        if exp_avg is not None:
            self._optimizer.exp_avg, self._optimizer.exp_avg_sq = exp_avg.copy(), exp_avg_sq.copy()
        self.fit_steps = step_count
        return _prior_mse(self._psi, q)[0]

    def update(self, rewards: Sequence[float] | Mapping[str, float]) -> np.ndarray:
        """One REINFORCE update with rewards R(n) (higher = corpus needs more batches); returns the new p.

        Minimises ``-Σ_n R(n) log softmax(ψ)_n`` (the exact expectation over corpora: no sampling, no
        baseline) for ``steps`` Adam steps with learning rate ``lr``. Rewards may be any finite numbers;
        for positive rewards p drifts toward ``R / Σ R``.

        Args:
            rewards: one value per corpus, as a sequence in :attr:`names` order or a mapping name -> value
                with exactly the scorer's names.

        Raises:
            NonFiniteRewardError: some reward is NaN/inf. ψ and the optimizer are unchanged.
            ValueError: wrong number of rewards or wrong names.
        """
        r = self._rewards_array(rewards)
        bad = {name: float(value) for name, value in zip(self.names, r) if not math.isfinite(value)}
        if bad:
            raise NonFiniteRewardError(bad)
        total = r.sum()
        # d/dψ of -Σ R(n) log softmax(ψ)_n is (Σ R)·p - R; the loss value itself is never needed.
        self._minimise(lambda psi: (0.0, total * softmax(psi) - r), self._optimizer, self.steps)
        return self.probabilities

    def _rewards_array(self, rewards: Sequence[float] | Mapping[str, float]) -> np.ndarray:
        if isinstance(rewards, Mapping):
            check_exact_names([str(k) for k in rewards], self.names,
                              missing="Rewards must name exactly the scorer's corpora {expected}; missing {missing}, "
                              "unknown {extra}.")
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
        """JSON-serialisable state (plain lists, floats, ints, strings), format :data:`_STATE_FORMAT` (2).

        Holds ψ, the hyperparameters, ``prior_fit``, ``fit_steps`` and the Adam
        state (``step``, ``exp_avg``, ``exp_avg_sq``; ``None`` while the optimizer has taken no step, i.e.
        with ``prior_fit="exact"`` before the first update). Python's ``json`` writes floats with ``repr``,
        which round-trips float64 exactly, so a scorer restored with :meth:`load_state_dict` continues
        bit-identically.
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
            "lr": self.lr,
            "steps": self.steps,
            "betas": list(self.betas),
            "prior_fit": self.prior_fit,
            "fit_steps": int(self.fit_steps),
            "adam": adam,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (also after a JSON round trip).

        The corpus names must be the same, in the same order. ``lr``, ``steps``, ``betas`` and
        ``prior_fit`` are taken from the state (not from the constructor) so that the resumed run is the
        same run. Format-1 states (written before ``prior_fit`` existed) were all started the ``exact`` way
        and load as such; they continue exactly as before. Newer, unknown formats are refused.
        """
        version = state.get("format", 1)
        if version not in (1, _STATE_FORMAT):
            raise ValueError(
                f"Scorer state has format {version!r}; this version of uat_hf reads formats 1 and {_STATE_FORMAT}. "
                "It was probably written by a newer uat_hf: upgrade to resume from it."
            )
        missing = [k for k in ("names", "logits", "lr", "steps") if k not in state]
        if version == _STATE_FORMAT:
            missing += [k for k in ("prior_fit", "fit_steps") if k not in state]
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
        prior_fit = self._check_prior_fit(state["prior_fit"]) if version == _STATE_FORMAT else "exact"
        fit_steps = int(state["fit_steps"]) if version == _STATE_FORMAT else 0
        adam = state.get("adam")
        adam_state = None
        if adam is not None:
            adam_state = (int(adam["step"]), vector("adam.exp_avg", adam["exp_avg"]),
                          vector("adam.exp_avg_sq", adam["exp_avg_sq"]))

        # Everything validated: now mutate.
        self.lr, self.steps, self.betas = lr, steps, betas
        self.prior_fit, self.fit_steps = prior_fit, fit_steps
        self._psi = logits
        self._optimizer = Adam(self.lr, self.betas)
        if adam_state is not None:
            self._optimizer.step_count, self._optimizer.exp_avg, self._optimizer.exp_avg_sq = adam_state

    def __repr__(self) -> str:
        probs = ", ".join(f"{n}={p:.4f}" for n, p in zip(self.names, self.probabilities))
        return f"CorpusScorer({probs}; lr={self.lr}, steps={self.steps}, prior_fit={self.prior_fit!r})"
