"""How p is learned: each strategy's measurement on dev (and train) batches and its proposal of p.

``base`` is the interface every strategy implements and ``registry`` finds them by name (built-ins, entry
points of group ``uat_hf.strategies``, ``module:Class``; docs/strategies.md); ``static`` holds the fixed
priors; ``scorer``, ``adam`` and ``scorer_strategy`` the logits scorer of MultiUAT and MultiDDS-S; ``rewards``
the interface of a measurement; one folder per method (``multiuat``, ``multidds_s``, ``mixing_law``) holds its
own maths and its strategy class."""
