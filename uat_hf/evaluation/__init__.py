"""Scoring per corpus: sacreBLEU metrics, the evaluation a Trainer runs, saved runs, significance, plots."""
