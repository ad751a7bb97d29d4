"""``uat-train``: train one translation model on several corpora with corpus balancing, then evaluate it.

    uat-train --config recipes/demo.yaml
    uat-train --config recipes/offline_multidomain.yaml --strategy temperature --output_dir runs/temp
    uat-train --config org/recipe-repo --max_steps 1000

What a run does, in order (every input is checked before any training step):

1. Recipe (``--config``: YAML file, directory with ``recipe.yaml`` or Hub repo id), then command-line
   overrides → ``UATConfig``, ``DataArguments``, ``ModelArguments``, ``RunArguments``.
2. Corpus specs (a ``NAME.{train,dev,test}`` directory or a list of corpus mappings) and the evaluation-only
   (out-of-domain) corpora.
3. Tokenizer: a joint subword vocabulary trained on the training corpora with the language tags as special
   tokens (saved to ``output_dir`` at once), or a saved / Hub tokenizer.
4. Data: cleaning, tagging, tokenization (``uat_hf.data.corpora.load_corpora``), cached by ``datasets``; the
   tokenizer and the tokenized corpora are also kept in the preparation cache (:mod:`uat_hf.cli.preparation`), from
   which a later run of the same recipe reads them instead of steps 3-4.
5. Model: a preset built from scratch or a pretrained checkpoint.
6. ``UATTrainer.train()``, then per-corpus BLEU/chrF on the eval split: a table with the macro average and
   the sacreBLEU signatures, ``eval_results.json``, and model + tokenizer + the effective ``recipe.yaml``
   (with a README model card) in ``output_dir``. Resumed (``--resume_from_checkpoint latest``) from a
   checkpoint already at ``max_steps``, a run whose evaluation was cut short, it evaluates that checkpoint's
   model instead of training.

Steps 2-4 and the checks on their results are in :mod:`uat_hf.cli.train_data`, the cache in
:mod:`uat_hf.cli.preparation`.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..utils.checkpoints import (
    BALANCING_STATE_FILE,
    checkpoint_bytes,
    checkpoint_step,
    free_bytes,
    megabytes,
    model_bytes,
    remove_torn_checkpoint,
    resolve_resume_checkpoint,
)
from ..utils.logging import set_verbosity
from .arguments import DataArguments, ModelArguments
from .parsing import command_line_level, parse_arguments
from .recipe import Recipe
from .run_arguments import RunArguments

# torch, datasets and transformers' Trainer are imported by the functions that use them, so that ``uat-train --help``
# (and a bad recipe) answers without loading them.

logger = logging.getLogger(__name__)
#: The folder of output_dir that holds the final evaluation's translations, <corpus>.txt (as uat-evaluate's).
HYPOTHESES_DIR = "hypotheses"

# --------------------------------------------------------------------------------------------- main


def prepare(
    training_args, data_args: DataArguments, model_args: ModelArguments, run_args: RunArguments | None = None,
    *, start: float | None = None,
):
    """Specs, tokenizer, data and model → ``(trainer, eval_corpora, out_of_domain_names)``.

    Everything that can fail because of bad input happens here, before the first training step.
    """
    from transformers import set_seed

    from ..models.presets import build_model
    from ..sampling.priors import corpus_probabilities_for
    from ..training.resume_check import check_resume, check_trainer_resume, resume_settings
    from ..training.uat_trainer import UATTrainer
    from .audit import audited_sizes, language_pairs, without_failing_pairs
    from .checkpoint_prompt import PromptInCheckpoints
    from .preparation import prepare_data
    from .time_budget import TimeBudgetCallback
    from .train_data import (
        InputError,
        build_specs,
        causal_prompt,
        check_before_training,
        check_lengths,
        check_model_lengths,
        check_tokenizer_codes,
        language_codes_for,
        position_limit,
        size_text,
        tags_for,
    )

    start = time.monotonic() if start is None else start
    output_dir = Path(training_args.output_dir)
    blocker = next((p for p in (output_dir, *output_dir.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise InputError(
            f"output_dir {str(output_dir)!r} cannot be created as a directory: {str(blocker)!r} is a file. Give "
            "another output_dir (it is created if missing), or move the file away."
        )
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"output_dir {str(output_dir)!r} cannot be created ({error.strerror}); give a writable "
                         "folder.") from None
    training_args.resume_from_checkpoint = resolve_resume_checkpoint(
        training_args.output_dir, training_args.resume_from_checkpoint,
        exact=not training_args.allow_inexact_resume,
    )
    if run_args is not None and run_args.torch_num_threads is not None:
        import torch

        torch.set_num_threads(run_args.torch_num_threads)
    set_seed(training_args.seed)

    check_lengths(position_limit(model_args), data_args)  # cheap early check, before any data is read
    specs, eval_specs = build_specs(data_args)
    if training_args.corpus_probabilities is not None:  # its names, before anything is read or written
        corpus_probabilities_for(training_args.corpus_probabilities, [spec.name for spec in specs])
    codes = language_codes_for(specs + eval_specs, data_args, model_args)
    prompt = causal_prompt(data_args) if model_args.is_causal else None
    tag_of, eval_tag_of = tags_for(specs, eval_specs, "none" if prompt else data_args.language_tags)
    tags = sorted({t for t in list(tag_of.values()) + list(eval_tag_of.values()) if t})
    logger.info(
        f"corpora: {', '.join(f'{s.name} ({s.source_lang}→{s.target_lang})' for s in specs)}"
        + (f"; evaluation only: {', '.join(s.name for s in eval_specs)}" if eval_specs else "")
    )

    resume = training_args.resume_from_checkpoint  # a folder: resolved once, above
    if resume and os.path.isfile(os.path.join(resume, BALANCING_STATE_FILE)):  # before anything is written
        check_resume(resume, strategy=training_args.strategy, names=[s.name for s in specs],
                     settings=resume_settings(training_args))
    tokenizer, train, dev, eval_corpora, ood, audit = prepare_data(
        training_args, data_args, model_args, specs, eval_specs, tags, tag_of, eval_tag_of, prompt, resume_from=resume)
    if data_args.corpus_audit == "drop":  # a corpus left out of training keeps its test set, not its dev set
        train = without_failing_pairs(audit, train, language_pairs(specs))
        dev = {name: dataset for name, dataset in dev.items() if name in train}
        specs = [spec for spec in specs if spec.name in train]
    corpus_generation_kwargs = check_tokenizer_codes(tokenizer, codes, data_args)
    if training_args.should_save and not resume:  # a resumed run keeps its own
        tokenizer.save_pretrained(output_dir)
        if prompt is not None:
            prompt.save_pretrained(output_dir)
    logger.info(f"tokenizer: {len(tokenizer)} tokens" + (f", language tags {tags}" if tags else "")
                + (f", {data_args.language_tags} codes " + ", ".join(f"{n} {c.source}→{c.target}"
                                                                     for n, c in codes.items()) if codes else ""))

    check_before_training(training_args, data_args, model_args, specs, train, dev, eval_corpora)
    logger.info(
        "data: " + ", ".join(f"{n} {size_text(train[n])} train / {len(dev[n]) if n in dev else 0} dev" for n in train)
        + f"; evaluating on {data_args.eval_split}: " + ", ".join(f"{n} {len(ds)}" for n, ds in eval_corpora.items())
    )

    model = build_model(
        model_args.model_name_or_path,
        tokenizer,
        num_beams=training_args.generation_num_beams,
        max_length=training_args.generation_max_length,
        lora=model_args.lora,
        **model_args.config_overrides(),
    )
    check_model_lengths(model, data_args)
    check_disk_space(training_args, model)
    for key, value in (model_args.generation_overrides or {}).items():
        setattr(model.generation_config, key, value)
    logger.info(f"model: {model_args.model_name_or_path}, {model.num_parameters() / 1e6:.2f}M parameters; "
                f"strategy {training_args.strategy}; prep took {time.monotonic() - start:.0f}s")

    # In-training evaluation (eval_strategy, load_best_model_at_end) always looks at the dev sets, never at test;
    # the final evaluation (train_and_evaluate) reports eval_split.
    callbacks = []
    if run_args is not None and run_args.max_train_minutes is not None:
        callbacks.append(TimeBudgetCallback(run_args.max_train_minutes * 60))
    if prompt is not None:
        callbacks.append(PromptInCheckpoints(prompt))
    trainer = UATTrainer(
        model, training_args, train_corpora=train, dev_corpora=dev, eval_corpora=dev, processing_class=tokenizer,
        callbacks=callbacks, corpus_generation_kwargs=corpus_generation_kwargs, corpus_audit=audit,
        corpus_sizes=audited_sizes(audit, data_args, train),
    )
    check_trainer_resume(trainer, resume)  # the prior too, now that the corpora are read: one error line
    return trainer, eval_corpora, ood


class DiskFullError(OSError):
    """Training stopped because ``output_dir`` ran out of space while saving."""


def check_disk_space(training_args, model) -> None:
    """Refuse a run whose first checkpoint and final model would not fit in ``output_dir``'s free space, so that
    a full disk is met before training rather than as a torn checkpoint and a traceback at the first save."""
    if not training_args.should_save:
        return
    weights = model_bytes(model)
    checkpoint = checkpoint_bytes(model) if training_args.save_strategy != "no" else 0
    free = free_bytes(training_args.output_dir)
    if free < checkpoint + weights:
        from .train_data import InputError

        raise InputError(
            f"output_dir {training_args.output_dir!r} has {megabytes(free)} free, but "
            + (f"the first checkpoint (about {megabytes(checkpoint)}: weights and optimizer state) and " if checkpoint
               else "")
            + f"the final model ({megabytes(weights)}) need about {megabytes(checkpoint + weights)}. Free some space "
            "or give an output_dir on a larger disk."
        )


def _disk_full(trainer, error: BaseException) -> DiskFullError | None:
    """After ``error`` escaped training or saving: remove the checkpoint whose save it cut short, and return a
    :class:`DiskFullError` naming ``output_dir`` and its free space when a full disk is the cause (the error the
    writer raises then is often not ``ENOSPC`` itself, e.g. torch's ``unexpected pos``)."""
    args = trainer.args
    if not args.should_save:
        return None
    free = free_bytes(args.output_dir)  # before the torn checkpoint's space comes back
    folder = os.path.join(args.output_dir, f"checkpoint-{trainer.state.global_step}")
    removed = remove_torn_checkpoint(folder)
    needed = checkpoint_bytes(trainer.model)
    if free >= needed and getattr(error, "errno", None) != errno.ENOSPC:
        return None
    return DiskFullError(
        f"output_dir {args.output_dir!r} ran out of space while saving at step {trainer.state.global_step} "
        f"({megabytes(free)} free; a checkpoint needs about {megabytes(needed)})"
        + (f"; the torn {folder!r} was removed" if removed else "")
        + ". Free some space, then resume with --resume_from_checkpoint latest."
    )


def train_and_evaluate(trainer, data_args: DataArguments, recipe: Recipe, eval_corpora, ood, *,
                       start: float | None = None):
    """Train, evaluate per corpus, print the table, save everything; returns the evaluation metrics."""
    from ..evaluation.copy_baseline import copy_baseline_metrics
    from ..evaluation.metrics import format_table, macro_means
    from ..evaluation.saved_runs import write_hypotheses
    from ..training.health_callback import CorpusHealthCallback
    from ..training.nonfinite import NonFiniteLossError
    from .model_card import stopped_early_note
    from .time_budget import budget_report
    from .train_data import build_specs, evaluation_sources

    start = time.monotonic() if start is None else start
    training_args = trainer.args
    output_dir = Path(training_args.output_dir)
    finished = finished_checkpoint(training_args)
    try:
        if finished is None:
            train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint or None)
            trainer.log_metrics("train", train_result.metrics)
            trainer.save_metrics("train", train_result.metrics)
        else:
            logger.info(f"{finished} is already at max_steps={training_args.max_steps}: training is done, evaluating "
                        "its model")
            trainer.load_checkpoint(finished)
        trainer.save_model()
        trainer.save_state()
    except Exception as error:
        if isinstance(error, NonFiniteLossError):  # nothing was being saved
            raise
        disk_full = _disk_full(trainer, error)
        if disk_full is None:
            raise
        raise disk_full from error

    logger.info(f"evaluating on {data_args.eval_split} ({time.monotonic() - start:.0f}s since start)")
    # translate (not evaluate) to keep the translations: written beside eval_results.json, as uat-evaluate does,
    # so that `uat-evaluate RUN --config RUN --compare OTHER_RUN/hypotheses` tests two runs against each other.
    translations = trainer.translate(eval_corpora, metric_key_prefix="eval")
    metrics = {key: value for t in translations.values() for key, value in t.output.metrics.items()}
    metrics.update(macro_means(metrics, list(eval_corpora), "eval"))
    trainer.log(metrics)
    if trainer.is_world_process_zero():
        for name, translation in translations.items():
            write_hypotheses(output_dir / HYPOTHESES_DIR, name, translation.hypotheses)
    metrics.update(copy_baseline_metrics(
        evaluation_sources(data_args, [s for group in build_specs(data_args) for s in group]), translations, "eval"))
    in_domain = {n: _scores(metrics, n) for n in eval_corpora if n not in ood}
    out_of_domain = {n: _scores(metrics, n) for n in ood}
    if in_domain and out_of_domain:
        for label, group in (("in_domain", in_domain), ("out_of_domain", out_of_domain)):
            metrics.update(macro_means(metrics, list(group), "eval", label=f"{label}_mean"))
    metrics.update(budget_report(trainer) if finished is None else {})
    health = next((c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback)), None)
    if health is not None and health.last is None:  # a finished run evaluated again: its last check, measured
        health.check(trainer.model, trainer.state.global_step)
    if health is not None:
        metrics["corpus_health"] = health.summary()
    if getattr(trainer, "corpus_audit", None) is not None:
        metrics["corpus_audit"] = trainer.corpus_audit.to_dict()
    trainer.save_metrics("eval", metrics)

    if trainer.is_world_process_zero():
        note = stopped_early_note(metrics)
        print(f"\n{data_args.eval_split} results ({'in-domain' if out_of_domain else 'per corpus'})"
              + (f" -- {note}" if note else ":"))
        print(format_table(in_domain or out_of_domain))
        if in_domain and out_of_domain:
            print(f"\n{data_args.eval_split} results (out-of-domain):")
            print(format_table(out_of_domain))
        if in_domain and out_of_domain:
            print(f"\nmean over all {len(eval_corpora)} corpora: BLEU {metrics['eval_mean_bleu']:.2f}  chrF "
                  f"{metrics['eval_mean_chrf']:.2f}")
        if data_args.max_eval_examples is not None:
            print(f"(first {data_args.max_eval_examples} sentences of each {data_args.eval_split} set only)")
        for name, signature in trainer.metric_signatures.items():
            print(f"sacreBLEU {name} signature: {signature}")
        for warning in metrics.get("corpus_health", {}).get("warnings", []):
            print(f"\nWARNING: {warning}")
        if metrics.get("corpus_health", {}).get("note"):
            print(f"\nNOTE: {metrics['corpus_health']['note']}")
        Recipe(recipe.to_dict(), source=recipe.source).save_pretrained(output_dir, results=metrics)
        logger.info(f"saved model, tokenizer, eval_results.json, {HYPOTHESES_DIR}/ and recipe.yaml to {output_dir} "
                    f"({time.monotonic() - start:.0f}s in all)")
    return metrics


def finished_checkpoint(training_args) -> str | None:
    """The checkpoint ``resume_from_checkpoint`` names (resolved to a folder by :func:`prepare`) when it is already
    at ``max_steps``; else ``None``.

    A driver that reruns interrupted runs with ``--resume_from_checkpoint latest`` meets runs whose training
    ended (the Trainer saves a checkpoint at the last step) but whose evaluation was cut short. The Trainer
    would take one more step from such a checkpoint, so ``UATTrainer.train`` refuses it; ``uat-train``
    evaluates it instead.
    """
    folder = training_args.resume_from_checkpoint
    if training_args.max_steps <= 0 or not folder:
        return None
    return folder if checkpoint_step(folder) >= training_args.max_steps else None


def _scores(metrics: dict[str, float], name: str) -> dict[str, float]:
    from ..evaluation.copy_baseline import COPY_KEYS

    keys = ("bleu", "chrf", *COPY_KEYS)
    return {key: metrics[f"eval_{name}_{key}"] for key in keys if f"eval_{name}_{key}" in metrics}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``uat-train``; returns 0 on success, 2 for bad input (reported before training), 1 when
    the disk filled up during training or the loss stopped being finite (no final model is saved then)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        training_args, data_args, model_args, run_args, recipe = parse_arguments(argv)
    except (ValueError, FileNotFoundError) as error:
        print(f"uat-train: error: {error}", file=sys.stderr)
        return 2
    set_verbosity(command_line_level(training_args))
    start = time.monotonic()
    created = not os.path.exists(training_args.output_dir)
    try:
        trainer, eval_corpora, ood = prepare(training_args, data_args, model_args, run_args, start=start)
    except (ValueError, FileNotFoundError) as error:
        if created:  # a refused run leaves nothing behind: no empty folder, no half-written tokenizer
            shutil.rmtree(training_args.output_dir, ignore_errors=True)
        print(f"uat-train: error: {error}", file=sys.stderr)
        return 2
    from ..training.nonfinite import NonFiniteLossError  # torch is loaded by now

    try:
        train_and_evaluate(trainer, data_args, recipe, eval_corpora, ood, start=start)
    except (DiskFullError, NonFiniteLossError) as error:
        print(f"uat-train: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
