"""The package's version, in one place: ``uat_hf.__version__``, the build (pyproject.toml reads it) and the
preparation cache's key (prepared data of another version is prepared anew) take it from here."""

__version__ = "0.1.0"
