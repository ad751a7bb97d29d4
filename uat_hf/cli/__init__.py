"""Command-line tools of uat-hf (``uat-train``, ``uat-evaluate``, ``uat-plot``) and their argument dataclasses.

The three tools speak one dialect: one parser (:class:`~uat_hf.cli.parsing.UATParser`, ``HfArgumentParser``
over dataclasses with a ``--config`` recipe as defaults), ``--field_name value`` (``--field-name`` also works),
and the same field name for the same concept (``corpus_dir``, ``source_lang``, ``eval_split``,
``max_eval_examples``, ``generation_num_beams``, ``bleu_tokenize``, ``output_dir`` ...). ``uat-train`` and
``uat-evaluate`` read their data through the same :class:`~uat_hf.cli.arguments.DataArguments`.
Nothing here imports torch until a tool runs.
"""

from .arguments import DataArguments, ModelArguments
from .parsing import UATParser, make_parser, recipe_to_dataclasses
from .run_arguments import RunArguments
from .tool_arguments import EvaluateArguments, PlotArguments

__all__ = [
    "DataArguments",
    "EvaluateArguments",
    "ModelArguments",
    "PlotArguments",
    "RunArguments",
    "UATParser",
    "make_parser",
    "recipe_to_dataclasses",
]
