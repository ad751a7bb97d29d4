"""MultiUAT (Wu et al., EMNLP 2021): the six uncertainty measures under Monte Carlo dropout."""
