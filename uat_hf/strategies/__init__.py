"""How p is learned: each strategy's measurement on dev (and train) batches and its update of p.

``scorer`` and ``adam`` are the logits scorer of MultiUAT and MultiDDS-S; ``rewards`` the interface of a
measurement; one folder per method (``multiuat``, ``multidds_s``, ``mixing_law``) holds its own maths."""
