"""mixing-law (after Aioli, ICLR 2025): p from measured dev-loss changes of short probe windows."""
