"""Training algorithms built on batchenv, installed as ``batchenv.algorithms``."""
