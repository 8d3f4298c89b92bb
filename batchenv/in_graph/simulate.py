"""simulate(): one lockstep step of a batch of envs and an algorithm (docs/concepts.md).

One call does, in this order:

1. rows to reset = every row if ``reset`` else the rows whose ``done`` is True;
2. reset them, zero their ``score`` and ``length``, call ``algo.begin_episodes(rows)``;
3. ``prev = observ``; ``action = algo.perform(prev)``; step every env; ``score += reward``;
   ``length += 1``;
4. ``algo.experience(prev, action, reward, done, next_observ, truncated)``;
5. for rows now done: add their score and length to the running means, call
   ``algo.end_episodes(rows)``;
6. with ``log``: if an episode finished since the last log, emit ``mean_score`` and
   ``mean_length`` and clear the means; hand the summaries to the logger.

A forced reset cuts running episodes short: they get no ``end_episodes`` and do not count
in the means. Callbacks are only called with non-empty index sets.

**torch.compile.** ``torch.compile(simulate)`` works for in-graph envs and for NumPy
BatchEnvs (whose reset and step are custom ops, so the env step is never a graph break).
The fixed-shape work is traced: masks for score, length and the running means, the env
reset and step, ``perform`` and ``experience``. The index sets handed to ``env.reset``,
``begin_episodes`` and ``end_episodes`` have data-dependent sizes; ``simulate`` makes them
with ``torch.nonzero`` at its own top level and Dynamo breaks the graph exactly there (a
host sync that an index-based API needs anyway). Code after a break compiles as a resume
frame in which the set size is a dynamic dimension, so once sizes 0, 1 and "many" have been
seen (Dynamo specialises 0 and 1) nothing recompiles, at a fixed batch size. The frames:

(a) the reset mask (one variant per value of ``reset``);
(b) env reset, zeroing, ``begin_episodes``, ``perform``, env step, ``experience``, means;
(c) ``end_episodes`` — only when the algorithm overrides it, else (b) runs on to the end;

then a region under ``torch.compiler.disable`` merges the summaries, reads the means and
writes the log (host reads, file I/O). Summaries cross the break on the env object, so
their keys and ``log`` add no guards. Masks instead of index sets (``torch.where`` over
all rows) would avoid the breaks, but cannot drive an index-based ``env.reset`` or the
callbacks; masks are used wherever an index set is not needed.

    >>> from batchenv.kernels import CartPole
    >>> env = InGraphBatchEnv(CartPole(num_envs=16, seed=0))
    >>> algo = RandomAlgorithm(env.single_action_space, seed=0)
    >>> for _ in range(100):
    ...     done, score, summaries = simulate(env, algo, log=True)
"""

from __future__ import annotations

from typing import Any

import torch

from batchenv.in_graph.algorithm import Algorithm, Summaries, overrides
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv

# The wrapper is cached on the env object itself: a cycle the garbage collector can free
# (a WeakKeyDictionary would keep every env alive through its wrapper's reference).
_WRAPPER_ATTRIBUTE = "_batchenv_in_graph_batch_env"


def simulate(
    env: Any,
    algo: Algorithm,
    reset: bool | torch.Tensor = False,
    log: bool = False,
    logger: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, Summaries]:
    """Run one lockstep step of ``env`` and ``algo``; return ``(done, score, summaries)``.

    Args:
        env: an InGraphBatchEnv, or an InGraphEnv / NumPy BatchEnv (wrapped once in an
            InGraphBatchEnv, cached per env object; see :func:`in_graph_batch_env`).
        algo: the four callbacks (see :class:`~batchenv.in_graph.algorithm.Algorithm`).
        reset: reset every row first, cutting running episodes short (bool or bool tensor).
        log: add ``mean_score``/``mean_length`` of the episodes finished since the last log
            (when there are any) to the summaries and write the summaries to the logger.
        logger: where ``log`` writes (an object with ``log(step, summaries)``, e.g.
            :class:`batchenv.logger.Logger`); default ``env.logger`` of the InGraphBatchEnv.
            The step is the number of ``simulate()`` calls on this env so far.

    Returns:
        ``done`` (bool ``[B]``: the row's episode ended at this step), ``score`` (the
        running return of each row, ``[B]`` or ``[B, agents]``) and the merged summaries.

    Example:
        >>> env = InGraphBatchEnv(CartPole(num_envs=8))
        >>> algo = RandomAlgorithm(env.single_action_space)
        >>> done, score, summaries = simulate(env, algo)
        >>> compiled = torch.compile(simulate)
        >>> done, score, summaries = compiled(env, algo, log=True)
    """
    batch = in_graph_batch_env(env)

    # 1-2. Reset finished rows (all rows when forced).
    # A literal False (the common call) adds no elementwise op: bool stores are slow in
    # compiled CPU code (a masked vector store per 8 rows).
    reset_mask = batch.done if reset is False else batch.done | reset
    rows = torch.nonzero(reset_mask).squeeze(-1)  # graph break: data-dependent size
    begun = None
    if rows.shape[0] > 0:
        batch.reset(rows)
        batch.score = torch.where(_expand(reset_mask, batch.score), 0.0, batch.score)
        batch.length = torch.where(reset_mask, 0, batch.length)
        begun = algo.begin_episodes(rows)

    # 3-5. Act, step, learn from the transition; finished episodes feed the running means.
    done, score, learned = act_and_learn(batch, algo)
    # The summaries so far ride on the env object: a compiled frame that resumes after the
    # graph break below never reads them, so their keys add no guards (and no recompiles).
    batch.pending_summaries = _join(begun, learned)
    ended = None
    if overrides(algo, "end_episodes"):
        ended_rows = torch.nonzero(done).squeeze(-1)  # graph break: data-dependent size
        if ended_rows.shape[0] > 0:
            ended = algo.end_episodes(ended_rows)

    # 6. Means and logging run eagerly (host reads, file writes).
    return done, score, _finish(batch, ended, log, logger)


def act_and_learn(batch: InGraphBatchEnv, algo: Algorithm) -> tuple:
    """Steps 3-5 of a call (shared with ``rollout()``): ``perform``, the env step, ``score``
    and ``length``, ``experience``, and the running means of the rows now done.

    Returns ``(done, score, summaries of experience)``.
    """
    prev = batch.observ
    action = algo.perform(prev)
    observ, reward, _, truncated = batch.step(action)
    done = batch.done
    batch.score = batch.score + reward
    batch.length = batch.length + 1
    # Counters nobody else holds change in place: a compiled program then writes them where
    # they are instead of returning new tensors (~0.5 us each a call on a CPU).
    batch.steps.add_(1)
    learned = algo.experience(prev, batch.action, reward, done, observ, truncated)
    score = batch.score
    per_row = torch.where(_expand(done, score), score, 0.0).sum() / score[0].numel()
    batch.score_total.add_(per_row)
    batch.length_total.add_(torch.where(done, batch.length, 0).sum())
    batch.episodes.add_(done.sum())
    return done, score, learned


def in_graph_batch_env(env: Any) -> InGraphBatchEnv:
    """``env`` itself when it is an InGraphBatchEnv, else its cached InGraphBatchEnv wrapper.

    The wrapper (and so the state of ``simulate()``: observ, done, score, ...) is made on
    first use and stored on ``env`` as the attribute ``_batchenv_in_graph_batch_env``.

        >>> raw = CartPole(num_envs=4)
        >>> in_graph_batch_env(raw) is in_graph_batch_env(raw)
        True
    """
    if isinstance(env, InGraphBatchEnv):
        return env
    wrapper = getattr(env, _WRAPPER_ATTRIBUTE, None)
    if wrapper is None:
        wrapper = _wrap(env)
    return wrapper


@torch.compiler.disable
def _wrap(env: Any) -> InGraphBatchEnv:
    wrapper = InGraphBatchEnv(env)
    try:
        setattr(env, _WRAPPER_ATTRIBUTE, wrapper)
    except AttributeError as error:
        raise TypeError(
            f"simulate() cannot cache its state on a {type(env).__name__} (no attribute "
            f"assignment); pass InGraphBatchEnv(env) to simulate() instead"
        ) from error
    return wrapper


def _expand(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A row mask ``[B]`` shaped to broadcast against ``like`` (``[B, agents, ...]``)."""
    return mask.reshape(mask.shape[0], *([1] * (like.dim() - 1)))


def _join(*parts: Summaries | None) -> Summaries:
    summaries: Summaries = {}
    for part in parts:
        if part:
            summaries.update(part)
    return summaries


def _finish_eagerly(
    batch: InGraphBatchEnv, ended: Summaries | None, log: bool, logger: Any
) -> Summaries:
    """All summaries of this step; with ``log``, add and clear the means and write them."""
    summaries = _join(batch.pending_summaries, ended)
    batch.pending_summaries = {}
    if not log:
        return summaries
    episodes = int(batch.episodes)
    if episodes:
        summaries["mean_score"] = batch.score_total / episodes
        summaries["mean_length"] = batch.length_total / episodes
        batch.score_total.zero_()
        batch.length_total.zero_()
        batch.episodes.zero_()
    logger = logger if logger is not None else batch.logger
    if logger is not None and summaries:
        logger.log(int(batch.steps), summaries)
    return summaries


# What a compiled simulate() calls: never traced (host reads, file writes). rollout(), which
# Dynamo does not trace, calls _finish_eagerly and skips the wrapper's ~10 us.
_finish = torch.compiler.disable(_finish_eagerly)
