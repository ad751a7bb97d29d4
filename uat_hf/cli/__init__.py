"""Command-line tools of uat-hf (``uat-train``) and their argument dataclasses."""

from .arguments import DataArguments, ModelArguments, RunArguments, make_parser, parse_recipe_and_args

__all__ = ["DataArguments", "ModelArguments", "RunArguments", "make_parser", "parse_recipe_and_args"]
