"""In-graph simulation: the InGraphEnv and Algorithm protocols and simulate()."""
