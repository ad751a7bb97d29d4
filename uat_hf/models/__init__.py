"""Model presets built from configs, and the helpers that let decoder-only models be measured like seq2seq ones."""
