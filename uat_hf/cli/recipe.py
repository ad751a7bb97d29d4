"""Recipes: one YAML mapping that says everything a training run needs, loadable from a path or the Hub.

A recipe is a flat mapping of the fields of :class:`~uat_hf.training.uat_config.UATConfig` (training and
balancing), :class:`~uat_hf.cli.arguments.DataArguments` (corpora, cleaning, evaluation),
:class:`~uat_hf.cli.arguments.ModelArguments` (model and tokenizer) and
:class:`~uat_hf.cli.run_arguments.RunArguments` (a wall-clock budget)::

    strategy: multiuat
    measure: enteos
    corpus_dir: bundled:multidomain-en-de
    source_lang: en
    target_lang: de
    model_name_or_path: small
    learning_rate: 7.0e-4

It is stored as ``recipe.yaml`` in a local directory or a Hub repository, so that
``Recipe.from_pretrained("org/name")`` and ``uat-train --config org/name`` reproduce a run, and
``uat-train`` writes the effective recipe of every run next to the model it trained. YAML is read with
``yaml.safe_load`` only: a recipe can never execute code.

A :class:`Recipe` is only the file: plain YAML values, no knowledge of the dataclasses. Turning it into
them is the command line's job: :func:`uat_hf.cli.parsing.recipe_to_dataclasses`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import ModelCard, hf_hub_download

from ..utils.hub_errors import HubUnavailableError, hub_unavailable_message, is_hub_id, is_hub_unreachable
from .model_card import build_model_card

__all__ = ["RECIPE_FILE", "MODEL_CARD_FILE", "Recipe"]

RECIPE_FILE = "recipe.yaml"


class _RepeatedKey(yaml.YAMLError):
    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(f"key {key!r} repeated")
        self.key, self.first, self.second = key, first, second


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing a key given twice in one mapping (at any depth); YAML itself keeps
    the last value without a word. Keys merged in with ``<<`` may still be overridden, as YAML means them."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise _RepeatedKey(key, seen[key], line)
                except TypeError:  # an unhashable key: SafeLoader refuses it itself
                    continue
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _safe_load_unique(text: str) -> Any:
    """``yaml.safe_load(text)``, refusing repeated keys (:class:`_UniqueKeyLoader`, a ``SafeLoader``)."""
    loader = _UniqueKeyLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
MODEL_CARD_FILE = "README.md"


class Recipe(Mapping[str, Any]):
    """A read-only mapping of recipe fields with YAML and Hub I/O.

    Args:
        fields: field name → value (plain YAML types).
        source: where it was loaded from (for messages and the model card).
    """

    def __init__(self, fields: Mapping[str, Any] | None = None, *, source: str | None = None) -> None:
        fields = dict(fields or {})
        bad = [key for key in fields if not isinstance(key, str)]
        if bad:
            raise ValueError(f"Recipe field names must be strings; got {bad} in {source or 'recipe'}.")
        self._fields = fields
        self.source = source

    # ------------------------------------------------------------------ Mapping
    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"Recipe({self._fields!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._fields) == dict(other)
        return NotImplemented

    def to_dict(self) -> dict[str, Any]:
        return dict(self._fields)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_yaml(cls, text: str, *, source: str | None = None) -> Recipe:
        """Parse YAML text (``yaml.safe_load``); it must hold a mapping (an empty document is an empty recipe) and
        no key twice in one mapping."""
        try:
            data = _safe_load_unique(text)
        except _RepeatedKey as error:
            raise ValueError(
                f"{source or 'recipe'}: key {error.key!r} is given twice (lines {error.first} and {error.second}); "
                "YAML would silently keep the last value. Keep one of them."
            ) from None
        except yaml.YAMLError as error:
            raise ValueError(f"{source or 'recipe'} is not valid YAML: {error}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValueError(
                f"{source or 'recipe'} must be a YAML mapping of field: value, got a {type(data).__name__}."
            )
        return cls(data, source=source)

    @classmethod
    def from_yaml_file(cls, path: str | Path) -> Recipe:
        path = Path(path)
        return cls.from_yaml(path.read_text(encoding="utf-8"), source=str(path))

    @classmethod
    def from_pretrained(
        cls,
        path_or_repo_id: str | Path,
        *,
        filename: str = RECIPE_FILE,
        revision: str | None = None,
        cache_dir: str | Path | None = None,
        token: str | bool | None = None,
        repo_type: str | None = None,
        local_files_only: bool = False,
    ) -> Recipe:
        """Load a recipe from a YAML file, a directory holding ``recipe.yaml``, or a Hub repository.

        Args:
            path_or_repo_id: a local ``.yaml`` file, a local directory with ``filename`` in it, or a Hub repo
                id ``org/name`` (downloaded with ``huggingface_hub.hf_hub_download``).
            filename: the file inside a directory or repository (default ``recipe.yaml``).
            revision, cache_dir, token, repo_type, local_files_only: passed to ``hf_hub_download``
                (``repo_type`` ``"model"`` by default; recipes can also live in ``"dataset"`` repos).
        """
        location = str(path_or_repo_id)
        path = Path(location).expanduser()
        if path.is_file():
            return cls.from_yaml_file(path)
        if path.is_dir():
            file = path / filename
            if not file.is_file():
                raise FileNotFoundError(f"Directory {location!r} has no {filename}; save one with "
                                        "Recipe.save_pretrained.")
            return cls.from_yaml_file(file)
        if is_hub_id(location) and not location.endswith((".yaml", ".yml")):
            try:
                downloaded = hf_hub_download(
                    repo_id=location,
                    filename=filename,
                    revision=revision,
                    cache_dir=cache_dir,
                    token=token,
                    repo_type=repo_type,
                    local_files_only=local_files_only,
                )
            except Exception as error:  # huggingface_hub's errors differ by version; only these are converted
                if is_hub_unreachable(error):
                    raise HubUnavailableError(hub_unavailable_message("recipe", location, cache_dir)) from error
                raise
            recipe = cls.from_yaml_file(downloaded)
            recipe.source = f"{location}/{filename}" + (f"@{revision}" if revision else "")
            return recipe
        raise FileNotFoundError(
            f"Recipe {location!r} not found: not a YAML file, not a directory with {filename}, and not a Hub repo "
            "id of the form org/name."
        )

    # ------------------------------------------------------------------ saving
    def to_yaml(self) -> str:
        return yaml.safe_dump(self._fields, sort_keys=False, allow_unicode=True, default_flow_style=False)

    def save_pretrained(self, save_directory: str | Path, *, model_card: bool = True,
                        results: Mapping[str, float] | None = None) -> Path:
        """Write ``recipe.yaml`` and, unless ``model_card=False``, a ``README.md`` model card.

        Returns the path of ``recipe.yaml``. ``results`` (e.g. ``eval_results.json`` content) are listed in
        the card.
        """
        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        file = directory / RECIPE_FILE
        file.write_text(self.to_yaml(), encoding="utf-8")
        if model_card:
            self.model_card(results).save(directory / MODEL_CARD_FILE)
        return file

    def push_to_hub(self, repo_id: str, *, token: str | bool | None = None, private: bool | None = None,
                    repo_type: str | None = None, commit_message: str = "Upload recipe") -> str:
        """Upload ``recipe.yaml`` to a Hub repository (created if needed); returns the file's URL."""
        from huggingface_hub import HfApi

        api = HfApi(token=token)
        api.create_repo(repo_id, private=private, repo_type=repo_type, exist_ok=True)
        return api.upload_file(
            path_or_fileobj=self.to_yaml().encode("utf-8"), path_in_repo=RECIPE_FILE, repo_id=repo_id,
            repo_type=repo_type, commit_message=commit_message,
        )

    def model_card(self, results: Mapping[str, float] | None = None) -> ModelCard:
        """The model card of a run of this recipe (:func:`uat_hf.cli.model_card.build_model_card`): Hub metadata,
        what was trained on what, how balanced, how to reproduce, and the scores in ``results``."""
        return build_model_card(self._fields, results, recipe_file=RECIPE_FILE)
