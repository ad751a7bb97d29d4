"""MultiDDS-S (Wang et al., 2020): cosine of dev and train gradients as each corpus's reward."""
