"""``uat-train``'s pipeline as a Python script, for ``accelerate launch`` on one CPU, several GPUs or machines.

The same script runs on one CPU, on several GPUs and on several machines: ``accelerate launch`` decides
how many processes start, and ``UATTrainer`` keeps the corpus distribution identical on every rank. It runs
the library functions ``uat-train`` runs, in the same order, so a recipe trains the same model either way::

    accelerate launch --config_file examples/accelerate_configs/single_cpu.yaml examples/train_multiuat.py
    accelerate launch --config_file examples/accelerate_configs/multi_gpu.yaml examples/train_multiuat.py \\
        --config recipes/offline_multidomain.yaml --max_steps 20000

Without ``--config`` it trains ``recipes/demo.yaml`` (the bundled sample, offline). Every recipe field is a
flag, exactly as for ``uat-train`` (``--strategy multidds-s``, ``--model_name_or_path Helsinki-NLP/opus-mt-en-de``,
``--corpus_dir DIR`` ...; ``uat-train --help`` lists them). ``--use_cpu`` defaults to "no CUDA device here", so
the same command uses the GPUs where there are some. To change what happens between building and training
(another callback, a different model), edit ``main`` between ``prepare`` and ``train_and_evaluate``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch

from uat_hf.cli.train import parse_arguments, prepare, train_and_evaluate
from uat_hf.evaluation.plotting import plot_run
from uat_hf.utils.checkpoints import HISTORY_FILE

DEMO_RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "demo.yaml"


def main(argv: list[str] | None = None) -> dict[str, float]:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" not in argv:
        argv = ["--config", str(DEMO_RECIPE), *argv]
    if not any(a.startswith(("--use_cpu", "--use-cpu")) for a in argv):
        # On a machine without CUDA, several `accelerate launch` processes only form a (gloo) group with use_cpu.
        argv += ["--use_cpu", str(not torch.cuda.is_available())]
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    training_args, data_args, model_args, run_args, recipe = parse_arguments(argv)
    try:
        # Specs, tokenizer, tokenized corpora and model, each input checked before the first step.
        trainer, eval_corpora, out_of_domain = prepare(training_args, data_args, model_args, run_args)
        # Train, score every corpus, save model, tokenizer, eval_results.json and the effective recipe.yaml.
        metrics = train_and_evaluate(trainer, data_args, recipe, eval_corpora, out_of_domain)
        output_dir = Path(training_args.output_dir)
        if trainer.is_world_process_zero() and (output_dir / HISTORY_FILE).is_file():
            for path in plot_run(output_dir):
                print(f"wrote {path}")
        return metrics
    finally:
        # Without this, gloo aborts at interpreter exit in about half of multi-process CPU runs.
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
