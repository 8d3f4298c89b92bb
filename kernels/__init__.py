"""Batched torch and Triton environments, installed as ``batchenv.kernels``."""
