"""A drop-in ``Seq2SeqTrainer`` that trains on many named corpora and evaluates each one separately.

What it adds to the stock trainer, and why:

* **Training data** is a dict of named, tokenized corpora. Batches come from a
  :class:`~uat_hf.sampling.sampler.CorpusBatchSampler` (one corpus per batch, drawn from live probabilities),
  because ``interleave_datasets`` cannot change its mix during training.
* **Balancing** is wired by :func:`~uat_hf.training.balancing.attach_balancing` from the arguments, as it would be on
  a stock trainer: the :class:`~uat_hf.sampling.distribution.CorpusDistribution` that owns p, the sampler that reads
  it, and the :class:`~uat_hf.training.callback.CorpusBalancingCallback` that updates it, checkpoints and logs it.
* **Evaluation** has one path, :meth:`UATTrainer.translate`, used by ``evaluate``, ``predict`` and
  ``uat-evaluate``: the Trainer's own generation loop (distributed, FSDP-aware) over each named corpus,
  longest source first so that batches pad and wait little, then detokenized hypotheses scored against the
  raw references with sacreBLEU and chrF (``eval_<corpus>_bleu``, ``eval_<corpus>_chrf``), plus their macro
  averages ``eval_mean_bleu`` / ``eval_mean_chrf``, usable as ``metric_for_best_model="mean_bleu"``. A user's
  ``compute_metrics`` runs per corpus too (``eval_<corpus>_<key>``, ``eval_mean_<key>``; see
  :mod:`~uat_hf.evaluation.user_metrics`).
* Without ``train_corpora`` it is an evaluation-only trainer (as a ``Trainer`` without ``train_dataset``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from datasets import Dataset
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq, EvalPrediction, Seq2SeqTrainer, TrainerState
from transformers.trainer_utils import PredictionOutput

from ..data.language_codes import labels_generation_kwargs, places_language_codes, save_generation_kwargs
from ..evaluation import user_metrics
from ..evaluation.causal_eval import continuation, first_line, left_padding, prompt_only
from ..evaluation.corpus_evaluation import corpus_references, in_original_order, longest_source_first_order
from ..evaluation.metrics import CORPUS_METRICS, detokenize, macro_means, translation_scores
from ..models.causal_lm import is_causal_lm
from ..models.targets import require_supported_model
from ..sampling.distribution import CorpusDistribution
from ..utils.checkpoints import (
    BALANCING_STATE_FILE,
    TRAINER_STATE_FILE,
    checkpoint_step,
    remove_stray_temporaries,
    resolve_resume_checkpoint,
)
from ..utils.columns import IGNORE_INDEX, REFERENCE_COLUMN
from .balancing import attach_balancing, check_corpora, concatenate_corpora, corpus_dataloader
from .nonfinite import watch_nonfinite_loss
from .resume_check import check_trainer_resume
from .throughput import TrainedCount
from .trainer_corpora import named_corpora
from .uat_config import UATConfig

__all__ = ["CorpusTranslation", "UATTrainer", "attach_balancing", "concatenate_corpora", "corpus_dataloader"]

SIGNATURES_FILE = "metric_signatures.json"


@dataclass
class CorpusTranslation:
    """One corpus translated and scored by :meth:`UATTrainer.translate`, rows in the corpus's own order."""

    hypotheses: list[str]
    references: list[str] | None
    output: PredictionOutput  # generated token ids, labels, and the metrics (BLEU/chrF when references exist)
    metric_keys: list[str] = field(default_factory=list)  # the keys the user's compute_metrics returned


class UATTrainer(Seq2SeqTrainer):
    """``Seq2SeqTrainer`` over a dict of named corpora with corpus balancing and per-corpus BLEU/chrF.

    Args:
        model: any Hugging Face encoder-decoder model (MarianMT, BART, T5, ...).
        args: :class:`~uat_hf.training.uat_config.UATConfig`.
        train_corpora: name → tokenized ``Dataset`` or streamed ``IterableDataset`` with ``input_ids``/``labels``
            (``None``: an evaluation-only trainer, as a ``Trainer`` built without ``train_dataset``). The stock
            keyword ``train_dataset=`` takes the same dict.
        dev_corpora: name → tokenized trusted dev set per training corpus (what MultiUAT/MultiDDS-S measure;
            default: the evaluation corpora of the training corpora's names, :mod:`~uat_hf.training.trainer_corpora`).
        eval_corpora: name → tokenized sets to evaluate by generation (default: ``dev_corpora``); the stock keyword
            ``eval_dataset=`` takes the same dict. A ``target_text`` column, when present, gives the references;
            otherwise the labels are decoded.
        processing_class: the tokenizer (needed to decode translations).
        corpus_generation_kwargs: name → ``generate`` keyword arguments for that corpus only, e.g.
            ``{"de": {"forced_bos_token_id": 250004}}``: in a one-to-many run with NLLB / M2M100 / mBART-50
            every corpus is translated into its own language, which generation is told by forcing that
            language's code as the first token (:func:`uat_hf.data.language_codes.generation_kwargs` makes the
            mapping). :meth:`translate` applies them to every evaluation; a keyword given to the call itself wins.
            A corpus given no ``forced_bos_token_id`` gets the language code its labels open with, when the
            tokenizer places codes (a warning names a corpus whose labels show none). They are saved beside the
            model (``corpus_generation_kwargs.json``); a code shared by every corpus also goes into the model's
            ``generation_config`` (``forced_bos_token_id``), so a reloaded model generates in that language.
        corpus_sizes: name → the size the prior counts (default: its examples; the audit's effective sizes).
        corpus_audit: the :class:`~uat_hf.data.audit.AuditReport` of the training corpora, for the results.
        Remaining keyword arguments go to ``Seq2SeqTrainer``.
    """

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        args: UATConfig | None = None,
        *,
        train_corpora: Mapping[str, Dataset] | None = None,
        dev_corpora: Mapping[str, Dataset] | None = None,
        eval_corpora: Mapping[str, Dataset] | None = None,
        processing_class: Any = None,
        data_collator: Callable | None = None,
        compute_metrics: Callable[[EvalPrediction], dict] | None = None,
        callbacks: list | None = None,
        corpus_generation_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        corpus_sizes: Mapping[str, float] | None = None,
        corpus_audit: Any = None,
        **kwargs: Any,
    ) -> None:
        train, self.dev_corpora, self.eval_corpora = named_corpora(train_corpora, dev_corpora, eval_corpora, kwargs)
        self.train_corpora = train or {}
        if args is None:
            args = UATConfig(output_dir="uat_output")
        if not isinstance(args, UATConfig):
            raise TypeError(f"args must be a UATConfig (got {type(args).__name__}); it carries the balancing "
                            "settings.")
        if processing_class is None:
            raise ValueError("UATTrainer needs processing_class (the tokenizer) to batch inputs and decode "
                             "translations.")
        if model is not None:
            require_supported_model(model)
        if train is not None:
            check_corpora(self.train_corpora, self.dev_corpora, args)
        if data_collator is None:
            data_collator = DataCollatorForSeq2Seq(processing_class, model=model, label_pad_token_id=IGNORE_INDEX)
        self._references = {name: corpus_references(ds, processing_class, name)
                            for name, ds in self.eval_corpora.items()}
        self.corpus_generation_kwargs = {name: dict(value) for name, value in (corpus_generation_kwargs or {}).items()}
        self._codes_read: set[str] = set()
        self.metric_signatures: dict[str, str] = {}
        self._trained = TrainedCount()  # examples and tokens trained on by the current train() call
        super().__init__(
            model=model,
            args=args,
            eval_dataset=self.eval_corpora or None,
            processing_class=processing_class,
            data_collator=data_collator,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            **kwargs,
        )
        self.corpus_audit = corpus_audit
        self.balancing = None if train is None else attach_balancing(
            self, self.train_corpora, self.dev_corpora, corpus_sizes=corpus_sizes)
        self.corpus_sampler = self.balancing.sampler if self.balancing is not None else None
        watch_nonfinite_loss(self)
        self._read_generation_codes()
        if compute_metrics is not None and not self.args.batch_eval_metrics:  # a clashing key: refused now
            user_metrics.probe_compute_metrics(compute_metrics, self.eval_corpora, processing_class.pad_token_id,
                                               self.args.corpus_metrics,
                                               include_inputs="inputs" in self.args.include_for_metrics)

    #: Tells :func:`~uat_hf.training.balancing.attach_balancing` that get_train_dataloader already reads the sampler.
    owns_corpus_sampler = True

    @property
    def corpus_distribution(self) -> CorpusDistribution:
        """The live corpus distribution p (its prior, strategy, updates and history)."""
        return self.balancing.distribution

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any):
        """As ``Trainer.train``; on resume the sampler and scorer continue from the same checkpoint.

        ``resume_from_checkpoint=True`` (or the strings ``"true"`` / ``"latest"``, as the command line gives
        them) takes the last *complete* checkpoint of ``output_dir``: folders left empty or torn by a run
        killed while saving are skipped. A checkpoint that cannot be resumed exactly, one of another run (strategy,
        corpora, settings: :mod:`~uat_hf.training.resume_check`) or one already at ``max_steps`` (the stock loop
        would train one step past it) is refused before training starts, and before any file changes.
        """
        if self.balancing is None:
            raise ValueError("This UATTrainer was built without train_corpora, for evaluation only: pass "
                             "train_corpora={name: tokenized Dataset, ...} to train.")
        resume_from_checkpoint = resolve_resume_checkpoint(self.args.output_dir, resume_from_checkpoint,
                                                           exact=not self.args.allow_inexact_resume)
        check_trainer_resume(self, resume_from_checkpoint)  # before any file of the run changes
        if resume_from_checkpoint and self.args.should_save:
            remove_stray_temporaries(self.args.output_dir)
        if resume_from_checkpoint and self.args.max_steps > 0:
            done = checkpoint_step(resume_from_checkpoint)
            if done >= self.args.max_steps:
                raise ValueError(
                    f"Checkpoint {resume_from_checkpoint!r} is already at step {done} and max_steps is "
                    f"{self.args.max_steps}: nothing is left to train. Raise max_steps to train on, or load the "
                    "trained model from the checkpoint (load_checkpoint)."
                )
        self.balancing.resume_from = resume_from_checkpoint or None
        self._trained = TrainedCount()
        return super().train(resume_from_checkpoint=resume_from_checkpoint or None, **kwargs)

    def load_checkpoint(self, folder: str) -> None:
        """Put the trainer where ``train`` left it at checkpoint ``folder``: the weights (by the Trainer's own
        loader, as a resume loads them, in every format), the trainer state, and the balancing state with its
        history (the final p). For a checkpoint already at ``max_steps``, which ``train`` refuses to resume."""
        self._load_from_checkpoint(folder)
        self.state = TrainerState.load_from_json(os.path.join(folder, TRAINER_STATE_FILE))
        if self.balancing is not None and os.path.isfile(os.path.join(folder, BALANCING_STATE_FILE)):
            self.balancing.restore(folder, self.args)  # absent only when allow_inexact_resume accepted the folder

    # ------------------------------------------------------------------ data
    def get_train_dataloader(self) -> DataLoader:
        return corpus_dataloader(self, self.corpus_sampler, self.train_dataset)

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None
                      ) -> torch.Tensor:
        self._trained.add(inputs)  # what the model trains on, for the true throughput at the end (log)
        return super().training_step(model, inputs, num_items_in_batch)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """The Trainer's log. The final entry's ``train_samples_per_second`` (the Trainer's counts
        ``per_device_train_batch_size`` examples per batch) is replaced by the examples really trained on, and
        ``train_tokens_per_second`` (source + target tokens, padding excluded) is added, both over all processes.
        (The balancing numbers join the entry in the callback's ``on_log``, under any trainer.)"""
        if "train_runtime" in logs:
            logs.update(self._trained.speed_metrics(logs["train_runtime"], self.accelerator))
        super().log(logs, start_time)

    # ------------------------------------------------------------------ evaluation
    def translate(
        self,
        corpora: Mapping[str, Dataset] | str | None = None,
        metric_key_prefix: str = "test",
        ignore_keys: list[str] | None = None,
        **gen_kwargs: Any,
    ) -> dict[str, CorpusTranslation]:
        """Translate and score each named corpus (default: ``eval_corpora``; a string names one of them).

        The one generate → detokenize → sacreBLEU/chrF path of the library: ``evaluate``, ``predict`` and
        ``uat-evaluate`` all come here, so a score means the same wherever it is printed. Generation settings
        are the Trainer's (``generation_num_beams``, ``generation_max_length``), then the corpus's own
        ``corpus_generation_kwargs`` (its target-language code), then ``gen_kwargs`` such as ``max_new_tokens``
        (for every corpus); metrics are ``<prefix>_<corpus>_bleu`` / ``_chrf``. The sacreBLEU signatures go to
        ``metric_signatures`` and ``output_dir/metric_signatures.json``.
        """
        translations = {
            name: self._translate_dataset(dataset, self._references_of(name, dataset), f"{metric_key_prefix}_{name}",
                                          ignore_keys, {**self._generation_kwargs_of(name, dataset), **gen_kwargs})
            for name, dataset in self._named_corpora(corpora).items()
        }
        if self.args.should_save and self.metric_signatures:
            os.makedirs(self.args.output_dir, exist_ok=True)
            with open(os.path.join(self.args.output_dir, SIGNATURES_FILE), "w", encoding="utf-8") as f:
                json.dump(self.metric_signatures, f, indent=2)
        return translations

    def evaluate(
        self,
        eval_dataset: Dataset | Mapping[str, Dataset] | str | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
        **gen_kwargs: Any,
    ) -> dict[str, float]:
        """Per-corpus generation metrics plus their macro averages (``<prefix>_mean_bleu``/``_chrf``).

        One evaluation of many corpora is one ``on_evaluate`` event and one log entry carrying every
        corpus's metrics and the means, so ``EarlyStoppingCallback`` and ``load_best_model_at_end`` can
        follow ``metric_for_best_model="mean_bleu"``.
        """
        if isinstance(eval_dataset, Dataset):
            metrics = self._translate_dataset(eval_dataset, corpus_references(eval_dataset, self.processing_class),
                                              metric_key_prefix, ignore_keys, gen_kwargs).output.metrics
        else:
            translations = self.translate(eval_dataset, metric_key_prefix, ignore_keys, **gen_kwargs)
            metrics = {}
            for translation in translations.values():
                metrics.update(translation.output.metrics)
            metrics.update(macro_means(metrics, list(translations), metric_key_prefix, self.args.corpus_metrics))
            keys = {name: translation.metric_keys for name, translation in translations.items()}
            metrics.update(user_metrics.user_metric_means(metrics, keys, metric_key_prefix))
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def predict(
        self,
        test_dataset: Dataset | Mapping[str, Dataset] | str,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "test",
        **gen_kwargs: Any,
    ) -> PredictionOutput | dict[str, PredictionOutput]:
        """Translations and metrics of one dataset, or of each named corpus (a dict, or the name of one of
        ``eval_corpora``): then a dict name → ``PredictionOutput`` whose metrics are ``<prefix>_<name>_bleu``
        and so on, each corpus in the original order of its rows. A dataset without references (neither a
        ``target_text`` nor a ``labels`` column) is translated without scores."""
        if isinstance(test_dataset, Dataset):
            columns = test_dataset.column_names
            references = (corpus_references(test_dataset, self.processing_class)
                          if REFERENCE_COLUMN in columns or "labels" in columns else None)
            return self._translate_dataset(test_dataset, references, metric_key_prefix, ignore_keys, gen_kwargs).output
        translations = self.translate(test_dataset, metric_key_prefix, ignore_keys, **gen_kwargs)
        return {name: translation.output for name, translation in translations.items()}

    def _translate_dataset(self, dataset: Dataset, references: list[str] | None, metric_key_prefix: str,
                           ignore_keys: list[str] | None, gen_kwargs: Mapping[str, Any]) -> CorpusTranslation:
        if not self.args.predict_with_generate:
            raise ValueError("UATTrainer scores generated translations: set predict_with_generate=True (the "
                             "UATConfig default).")
        causal = is_causal_lm(self.model)
        if causal:  # generate after the prompt only, left-padded; max_length would count the prompt
            dataset = prompt_only(dataset)
            gen_kwargs = {"max_new_tokens": self.args.generation_max_length or 256, **gen_kwargs}
        order = longest_source_first_order(dataset)
        with left_padding(self.processing_class) if causal else contextlib.nullcontext(), \
                user_metrics.recorded_metric_keys(self, self.args.corpus_metrics) as metric_keys:
            output = super().predict(dataset.select(order), ignore_keys, metric_key_prefix, **gen_kwargs)
        output = in_original_order(output, order)
        hypotheses = detokenize(self.processing_class, output.predictions)[: len(dataset)]
        if causal:
            hypotheses = [first_line(text) for text in hypotheses]
        if references is not None:
            scores, signatures = translation_scores(hypotheses, references, bleu_tokenize=self.args.bleu_tokenize,
                                                    metrics=self.args.corpus_metrics)
            self.metric_signatures.update(signatures)
            output.metrics.update({f"{metric_key_prefix}_{key}": value for key, value in scores.items()})
            # a local evaluate metric's keys are averaged over corpora as a compute_metrics' are
            metric_keys += [key for key in scores if key not in CORPUS_METRICS and key not in metric_keys]
        return CorpusTranslation(hypotheses, references, output, metric_keys)

    def prediction_step(self, model: torch.nn.Module, inputs: dict[str, Any], prediction_loss_only: bool,
                        ignore_keys: list[str] | None = None, **gen_kwargs: Any):
        # DataCollatorForSeq2Seq gives rows without labels ``labels=None``, which Seq2SeqTrainer takes for labels
        # and then asks the model for a loss it cannot compute: translate such rows without a loss.
        if "labels" in inputs and inputs["labels"] is None:
            inputs = {key: value for key, value in inputs.items() if key != "labels"}
        config = getattr(self.model, "generation_config", None)
        max_length = getattr(config, "max_length", None)
        loss, generated, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys,
                                                          **gen_kwargs)
        if config is not None:  # Seq2SeqTrainer writes the default max_length (20) into it: with max_new_tokens
            config.max_length = max_length  # (a causal model's length) every later batch would warn both are set
        if generated is not None and is_causal_lm(self.model):  # a decoder-only model returns prompt + answer
            generated = continuation(generated, inputs["input_ids"].shape[1])
        return loss, generated, labels

    def _generation_kwargs_of(self, name: str, dataset: Dataset) -> dict[str, Any]:
        """The corpus's ``corpus_generation_kwargs``; where they force no first token and the tokenizer places
        language codes, completed (once per name) with the code its labels open with, so that a code scheme
        without hand-made kwargs still translates each corpus into its own language."""
        kwargs = self.corpus_generation_kwargs.get(name, {})
        if ("forced_bos_token_id" in kwargs or name in self._codes_read
                or not places_language_codes(self.processing_class)):
            return kwargs
        self._codes_read.add(name)
        labels = dataset["labels"] if "labels" in dataset.column_names else None
        found = labels_generation_kwargs(self.processing_class, labels, name)
        if found:
            kwargs = self.corpus_generation_kwargs[name] = {**kwargs, **found}
        return kwargs

    def _read_generation_codes(self) -> None:
        """Each evaluation corpus's target code, read before training (so that a corpus without one warns now); a
        code forced for every corpus becomes the model's default (``generation_config``) unless it has one, so
        that a reloaded model generates in that language without being told."""
        for name, dataset in self.eval_corpora.items():
            self._generation_kwargs_of(name, dataset)
        names = set(self.corpus_generation_kwargs) | set(self.eval_corpora)  # a corpus without a code: no default
        forced = {self.corpus_generation_kwargs.get(name, {}).get("forced_bos_token_id") for name in names}
        config = getattr(self.model, "generation_config", None)
        if len(forced) == 1 and None not in forced and config is not None and config.forced_bos_token_id is None:
            config.forced_bos_token_id = forced.pop()

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """As ``Trainer.save_model`` (checkpoints included), plus each corpus's generate kwargs beside the model
        (:func:`~uat_hf.data.language_codes.save_generation_kwargs`): no single ``generation_config`` holds them
        all."""
        super().save_model(output_dir, _internal_call)
        if self.args.should_save and self.corpus_generation_kwargs:
            save_generation_kwargs(self.corpus_generation_kwargs, output_dir or self.args.output_dir)

    def _references_of(self, name: str, dataset: Dataset) -> list[str]:
        if name in self._references and dataset is self.eval_corpora.get(name):
            return self._references[name]
        return corpus_references(dataset, self.processing_class, name)

    def _named_corpora(self, corpora: Mapping[str, Dataset] | str | None) -> dict[str, Dataset]:
        if isinstance(corpora, str):
            if corpora not in self.eval_corpora:
                raise KeyError(f"No evaluation corpus named {corpora!r}; the trainer has {list(self.eval_corpora)}.")
            return {corpora: self.eval_corpora[corpora]}
        named = dict(corpora) if corpora is not None else self.eval_corpora
        if not named:
            raise ValueError("Nothing to evaluate: pass eval_corpora (or dev_corpora) to UATTrainer.")
        return named
