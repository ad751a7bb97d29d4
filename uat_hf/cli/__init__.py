"""Command-line tools of uat-hf (``uat-train``, ``uat-evaluate``, ``uat-plot``) and their argument dataclasses.

The three tools speak one dialect: ``HfArgumentParser`` over dataclasses, ``--field_name value`` (``--field-name``
also works), and the same field name for the same concept (``corpus_dir``, ``source_lang``, ``eval_split``,
``max_eval_examples``, ``generation_num_beams``, ``bleu_tokenize``, ``output_dir`` ...).
"""

from .arguments import DataArguments, ModelArguments, RunArguments
from .parsing import make_parser, parse_recipe_and_args
from .tool_arguments import EvaluateArguments, PlotArguments

__all__ = [
    "DataArguments",
    "EvaluateArguments",
    "ModelArguments",
    "PlotArguments",
    "RunArguments",
    "make_parser",
    "parse_recipe_and_args",
]
