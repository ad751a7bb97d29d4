"""The package's version, in one place: ``uat_hf.__version__``, the build (pyproject.toml reads it) and the
preparation cache's key (prepared data of another version is prepared anew) take it from here; and the versions of
the stack a run trained with, which the model card states as Transformers' own cards do: the same recipe on another
PyTorch or Transformers release may round differently, so a number is reproducible with its stack only."""

from importlib.metadata import PackageNotFoundError, version

__version__ = "0.1.0"

#: Label → distribution, in the order the model card lists them.
FRAMEWORKS = {"Transformers": "transformers", "PyTorch": "torch", "Accelerate": "accelerate",
              "Datasets": "datasets", "Tokenizers": "tokenizers"}


def framework_versions() -> dict[str, str]:
    """uat-hf's version and those of the installed frameworks it trains with (label → version)."""
    found = {"uat-hf": __version__}
    for label, distribution in FRAMEWORKS.items():
        try:
            found[label] = version(distribution)
        except PackageNotFoundError:  # a framework not installed is not listed
            continue
    return found
