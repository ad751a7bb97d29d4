"""Corpora in, tokenized datasets out: file formats, corpus specs, cleaning, tokenizers, language codes, prompts.

Nothing here knows how corpora are mixed; it hands named ``datasets`` objects to the layers above."""
