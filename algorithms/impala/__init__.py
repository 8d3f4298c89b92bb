"""IMPALA: V-trace, losses, models, and the synchronous and asynchronous modes."""
