"""rollout(): T steps of ``simulate()`` as one compiled program (docs/rollout.md).

``rollout(env, algo, steps=T)`` does exactly what T calls of ``simulate(env, algo)`` do, in the
same order, and returns their ``done`` and ``score`` stacked to ``[T, B]``. The difference is
how it runs: the T steps are traced by ``torch.compile`` with ``fullgraph=True`` (no graph
break anywhere), in chunks of ``unroll`` steps, so a step costs a few microseconds of fused
kernels instead of ~100 us of Python and dispatch.

What makes a step traceable:

- **Finished rows are a mask, not an index set.** At the top of each step the rows whose
  ``done`` is set are reset with ``env.reset_where(mask)`` (an optional InGraphEnv method:
  fresh starts for the masked rows, the observation of every row), and ``score``/``length``
  are zeroed with ``torch.where``. The batchenv kernels and NumPy BatchEnvs provide it.
- **The algorithm takes masks.** An algorithm whose class sets ``episode_masks = True`` gets
  ``begin_episodes(mask)`` and ``end_episodes(mask)`` with a bool ``[B]`` mask, on *every*
  step (the mask may be all False). One that keeps the index-set form can still run through
  ``simulate()`` step by step; ``rollout()`` refuses it up front, naming the method. An
  algorithm that overrides neither needs nothing.
- **Non-finite values are checked at the end.** With ``check_finite`` on (the
  default), a compiled step marks the rows where an action, observation or reward is NaN
  or infinite in tensor code, and ``rollout()`` reads the marks once when it returns,
  raising ValueError with the rows and the first step
  (:meth:`InGraphBatchEnv.raise_if_nonfinite`). ``simulate()`` checks every step.
- **Every method is plain tensor code**: no ``.item()``, ``print``, ``if tensor:``,
  ``nonzero`` or NumPy. As with ``jax.jit``, Python values the methods read (config
  numbers, flags) are fixed when the program is traced; only tensors are checked on later
  calls. When a method breaks the graph, :class:`GraphBreakError` names the
  method, its file and line, and the reason Dynamo gave.

Summaries: those of the last step (as T ``simulate()`` calls would leave them); with
``log=True`` the running means of the episodes finished during the rollout are added and one
row is written to the logger, at the env's step count after the rollout.

    >>> from batchenv.kernels import CartPole
    >>> env = InGraphBatchEnv(CartPole(num_envs=256, seed=0))
    >>> algo = RandomAlgorithm(env.single_action_space, seed=0)
    >>> done, score, summaries = rollout(env, algo, steps=64)
    >>> done.shape
    torch.Size([64, 256])
"""

from __future__ import annotations

import itertools
import linecache
import traceback
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

from batchenv.in_graph import _dtype_rules_once, _stack_buffers
from batchenv.in_graph._direct_call import DirectProgram
from batchenv.in_graph._scan_loop import ScanLoop
from batchenv.in_graph.algorithm import Algorithm, Summaries, overrides
from batchenv.in_graph.cuda_graph import recording
from batchenv.in_graph.in_graph_batch_env import InGraphBatchEnv
from batchenv.in_graph.simulate import (
    _expand,
    _finish_eagerly,
    _join,
    act_and_learn,
    in_graph_batch_env,
)
from batchenv.in_graph.vector_isa import probe_vector_isa

#: Steps per compiled program by default. Compile time grows with it (Inductor's C++ for
#: every unrolled step) while the per-call overhead it saves is ~10-30 us per chunk, so a few
#: steps per program is the balance on a CPU (benchmarks/RESULTS.md has the measurements).
DEFAULT_UNROLL = 4

_METHODS = ("begin_episodes", "perform", "experience", "end_episodes")


class GraphBreakError(TypeError):
    """An algorithm's method (or the env) cannot be traced into one graph by torch.compile."""


class Rollout(NamedTuple):
    """What :func:`rollout` returns: ``done`` and ``score`` per step, and the summaries."""

    done: torch.Tensor  # bool [T, B]
    score: torch.Tensor  # float32 [T, B] (or [T, B, agents])
    summaries: Summaries


def rollout(
    env: Any,
    algo: Algorithm,
    steps: int,
    *,
    reset: bool = False,
    log: bool = False,
    logger: Any = None,
    unroll: int | None = None,
    compile: bool = True,
    scan: bool = False,
) -> Rollout:
    """Run ``steps`` lockstep steps of ``env`` and ``algo`` as compiled code.

    Args:
        env: as for :func:`~batchenv.in_graph.simulate.simulate` (the same cached state is
            used, so ``rollout`` and ``simulate`` calls may be mixed).
        algo: the four methods; ``begin_episodes``/``end_episodes``, where overridden, must
            take masks (``episode_masks = True`` on the class).
        steps: T >= 1.
        reset: cut every running episode short before the first step (a forced reset).
        log: add ``mean_score``/``mean_length`` of the episodes finished during the rollout
            and write the summaries to the logger (see ``simulate``).
        logger: where ``log`` writes; default ``env.logger`` of the InGraphBatchEnv.
        unroll: steps per compiled program (traced once; the rollout loops over chunks).
            Default: the largest divisor of ``steps`` up to ``DEFAULT_UNROLL`` (4). Larger
            chunks cost compile time and save some call overhead per chunk.
        compile: False runs the same masked program eagerly (for debugging and tests).
        scan: on a CPU, run all ``steps`` as one compiled loop (torch's ``scan``): one step's
            code compiled once, the loop in C++. The first two rollouts of ``(env, algo,
            steps)`` run step by step (uncompiled) while the step's plan is learned; then the
            loop is compiled. ``unroll`` is then unused. Where the step cannot run as a
            loop (see ``batchenv.in_graph._scan_loop``), later rollouts run in compiled
            chunks.

    Returns:
        :class:`Rollout` ``(done [T, B], score [T, B], summaries)``.

    Raises:
        ValueError: ``steps`` or ``unroll`` out of range; a non-finite action, observation
            or reward during the rollout (checked once, at the end).
        GraphBreakError: a method takes index sets, or breaks the graph (named with its line).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"rollout(steps={steps!r}): steps must be an int >= 1")
    unroll = _choose_unroll(steps) if unroll is None else unroll
    if isinstance(unroll, bool) or not isinstance(unroll, int) or not 1 <= unroll <= steps:
        raise ValueError(f"rollout(unroll={unroll!r}): unroll must be an int in [1, steps]")
    _check_episode_methods(algo)
    batch = in_graph_batch_env(env)
    if scan and compile and not reset and batch.device.type == "cpu":
        scanned = _scanned(batch, algo, steps, log, logger)
        if scanned is not None:
            return scanned
    dones, scores = [], []
    done_so_far = 0
    first = True
    deferred, batch.defer_check = batch.defer_check, True
    try:
        while done_so_far < steps:
            chunk = min(unroll, steps - done_so_far)
            forced = bool(reset) and first
            try:
                program = _program(batch, algo, compile, chunk, forced)
                done, score = program(batch, algo, chunk, forced)
            except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as error:
                raise _named_break(algo, error) from error
            dones.append(done)
            scores.append(score)
            done_so_far += chunk
            first = False
    finally:
        batch.defer_check = deferred
    if batch.check_finite and not recording():  # a recorded graph's caller checks
        batch.raise_if_nonfinite()
    summaries = _finish_eagerly(batch, None, log, logger)
    return Rollout(torch.cat(dones), torch.cat(scores), summaries)


def _scanned(
    batch: InGraphBatchEnv, algo: Algorithm, steps: int, log: bool, logger
) -> Rollout | None:
    """rollout(scan=True): the compiled loop once the step's plan is known, else steps run
    one at a time through the program that learns it; None where no loop can be built (the
    rollout then runs in compiled chunks)."""
    programs = batch.__dict__.setdefault("_rollout_programs", {})
    key = (id(algo), "scan", steps)
    entry = programs.get(key)
    if entry is None or entry[0]() is not algo:
        options = program_options(batch.device, getattr(batch.env, "compile_options", None))
        guard_filter_fn = options.pop("guard_filter_fn")
        # Inductor's stack-array temporaries do not compile inside a loop's body.
        options.pop(_stack_buffers.OPTION, None)
        step = DirectProgram(_own_code(_steps), options, guard_filter_fn, inductor=False)
        entry = programs[key] = [weakref.ref(algo), step, None, options]
    _, step, loop, options = entry
    if step.refused is not None or (loop is not None and loop.refused is not None):
        return None
    args = (batch, algo, 1, False)
    deferred, batch.defer_check = batch.defer_check, True
    try:
        out = None
        if loop is None and step._plan is not None:
            loop = entry[2] = ScanLoop(step, args, steps, options)
            if loop.refused is not None:
                return None
        if loop is not None:
            out = loop(args)
            if out is None:  # the tensors changed shape or type: learn the plan again
                entry[2] = None
        if out is not None:
            done, score = (x.flatten(0, 1) for x in out)
        else:
            try:
                results = [step(*args) for _ in range(steps)]
            except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as error:
                raise _named_break(algo, error) from error
            done = torch.cat([d for d, _ in results])
            score = torch.cat([c for _, c in results])
    finally:
        batch.defer_check = deferred
    if batch.check_finite and not recording():
        batch.raise_if_nonfinite()
    summaries = _finish_eagerly(batch, None, log, logger)
    return Rollout(done, score, summaries)


def masked_step(batch: InGraphBatchEnv, algo: Algorithm, reset: bool = False) -> tuple:
    """One ``simulate()`` step with masks instead of index sets (traceable; see module doc).

    Returns ``(done [B], score [B, ...])`` and leaves the step's summaries on
    ``batch.pending_summaries``.
    """
    # A forced reset cuts the running episodes short: they count in no mean.
    reset_mask = batch.done if reset is False else torch.ones_like(batch.done)
    batch.reset_where(reset_mask)
    batch.score = torch.where(_expand(reset_mask, batch.score), 0.0, batch.score)
    batch.length = torch.where(reset_mask, 0, batch.length)
    begun = algo.begin_episodes(reset_mask) if overrides(algo, "begin_episodes") else None

    done, score, learned = act_and_learn(batch, algo)
    ended = algo.end_episodes(done) if overrides(algo, "end_episodes") else None
    batch.pending_summaries = _join(begun, learned, ended)
    return done, score


def _steps(batch: InGraphBatchEnv, algo: Algorithm, count: int, reset: bool) -> tuple:
    """``count`` masked steps, unrolled; ``done`` and ``score`` stacked to ``[count, B]``."""
    dones, scores = [], []
    for i in range(count):
        done, score = masked_step(batch, algo, reset=reset and i == 0)
        dones.append(done)
        scores.append(score)
    return torch.stack(dones), torch.stack(scores)


def _program(
    batch: InGraphBatchEnv, algo: Algorithm, compile: bool, count: int, reset: bool
) -> Callable:
    """The compiled program of ``(batch, algo, count, reset)``, kept on the batch env (every
    Python argument is part of the key: the program's guards cover tensors only)."""
    if not compile:
        return _steps
    programs = batch.__dict__.setdefault("_rollout_programs", {})
    key = (id(algo), count, bool(reset))
    entry = programs.get(key)
    if entry is not None and entry[0]() is algo:
        return entry[1]
    program = compile_program(_steps, batch.device, getattr(batch.env, "compile_options", None))
    programs[key] = (weakref.ref(algo), program)
    return program


def compile_program(
    function: Callable,
    device: torch.device | str,
    env_options: Mapping[str, Any] | None = None,
    direct: bool = True,
) -> Callable:
    """``torch.compile`` as rollout() and PPO's update use it: one graph, tensor-only guards.

    Guards check tensors only (their shapes, dtypes and devices): checking every Python
    attribute the four methods read cost ~55 us a call, a third of a compiled step. Like
    jax.jit, the program keeps the Python values (config numbers, flags) it was traced with.
    On a CPU the program's wrapper is C++ (Inductor's ``cpp_wrapper``): a PPO step calls
    ~25 kernels and allocates ~20 buffers, which the Python wrapper did at ~1 us each. Its
    temporaries (up to 100 KB) are arrays on the C stack rather than tensors (_stack_buffers):
    that halved the time of a PPO rollout step on CartPole.
    ``env_options`` (an env's ``compile_options``) are Inductor options added last.

    On a CPU, once two calls have shown Dynamo's plan (which tensors the graph reads, which
    attributes its outputs are stored in), later calls skip Dynamo and make the call
    themselves (:class:`~batchenv.in_graph._direct_call.DirectProgram`; ``direct=False``
    turns that off): its frame hook, guards and bytecode were half of a PPO rollout chunk's
    call on CartPole. A call whose tensors differ in dtype, device, shape or strides from the
    recorded ones goes through Dynamo again.

    On a CPU the first call also starts Inductor's probes of the SIMD instruction sets, all at
    once in the background (:func:`~batchenv.in_graph.vector_isa.probe_vector_isa`).

    Each call compiles a copy of ``function`` with a code object of its own. Dynamo keeps
    its graphs per code object and, with tensor-only guards, would hand one program's graph
    to another whose tensors look alike: a second PPO with another ``gamma`` ran the first
    one's constants. Own code objects also keep programs from evicting each other or from
    reaching the recompile limit.
    """
    function = _own_code(function)
    options = program_options(device, env_options)
    on_cpu = torch.device(device).type == "cpu"
    if on_cpu:
        probe_vector_isa()  # Inductor's SIMD probes, in the background while Dynamo traces
    if direct and on_cpu:
        guard_filter_fn = options.pop("guard_filter_fn")
        return DirectProgram(function, options, guard_filter_fn)
    return torch.compile(function, fullgraph=True, dynamic=False, options=options)


def program_options(
    device: torch.device | str, env_options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``torch.compile`` options of :func:`compile_program` (``guard_filter_fn`` among
    them), for ``device`` and an env's ``compile_options``."""
    _dtype_rules_once.install()  # less compile time (82 -> 67 s for PPO's rollout; see the module)
    options: dict[str, Any] = {"guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe}
    if torch.device(device).type == "cpu":
        options["cpp_wrapper"] = True
        if _stack_buffers.enable_per_program_choice():
            options[_stack_buffers.OPTION] = True
        # tanh as 2 / (1 + exp(-2x)) - 1: Sleef's 1-ulp tanh took 2 ns an element, a fifth
        # of a PPO minibatch step; this one is within ~1e-7 of it (absolute).
        options["cpp.use_decompose_tanh"] = True
        # Less Inductor work per program, same kernels' speed (measured in one process,
        # interleaved): no second, vectorised copy of every loop for its tail (a 4-env loop is
        # all tail), and a pointwise result of more than 10 ops that several others read is
        # computed once into a buffer instead of inlined (re-traced) into each reader. Cold
        # compile of PPO's CartPole rollout ~80 -> ~59 s, its update 36 -> 29 s, of a random
        # 256-env rollout ~60 -> ~24 s.
        options["cpp.enable_loop_tail_vec"] = False
        options["realize_opcount_threshold"] = 10
        # No -g1 line tables in the C++ build: g++ on PPO's rollout chunk 14.6 -> 12.4 s, a
        # trivial program's 5.2-5.9 -> 4.4 s; the machine code is the same.
        options["aot_inductor.enable_line_tables"] = False
    options.update(env_options or {})  # e.g. MinAtar's games turn CPU vectorisation off
    return options


_copies = itertools.count()


def _own_code(function: Callable) -> Callable:
    """``function`` with a fresh code object (named ``<name>_<n>``), same globals and closure
    (a callable that is not a plain function, such as a bound method, is left as it is)."""
    if not isinstance(function, types.FunctionType):
        return function
    code = function.__code__.replace(co_name=f"{function.__code__.co_name}_{next(_copies)}")
    copy = types.FunctionType(
        code, function.__globals__, code.co_name, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    return copy


def _choose_unroll(steps: int) -> int:
    """The largest divisor of ``steps`` up to ``DEFAULT_UNROLL`` (one program for all chunks)."""
    return max(d for d in range(1, min(steps, DEFAULT_UNROLL) + 1) if steps % d == 0)


def _check_episode_methods(algo: Algorithm) -> None:
    """Refuse index-set ``begin_episodes``/``end_episodes`` before anything is traced."""
    if getattr(algo, "episode_masks", False):
        return
    for name in ("begin_episodes", "end_episodes"):
        if overrides(algo, name):
            method = getattr(type(algo), name)
            code = getattr(method, "__code__", None)
            where = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
            raise GraphBreakError(
                f"rollout(): {type(algo).__name__}.{name}{where} takes an index set of rows, "
                f"whose size depends on the data and breaks the compiled graph; set "
                f"`episode_masks = True` on {type(algo).__name__} and take a bool mask [B] "
                f"(called every step), or call simulate() step by step"
            )


def _named_break(algo: Algorithm, error: Exception) -> GraphBreakError:
    """A GraphBreakError naming the algorithm method and line where Dynamo stopped."""
    frames = list(getattr(error, "real_stack", None) or [])
    if not frames and error.__traceback__ is not None:
        frames = traceback.extract_tb(error.__traceback__)
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    cls = type(algo)
    files = {getattr(getattr(cls, m, None), "__code__", None) for m in _METHODS}
    files = {code.co_filename for code in files if code is not None}
    for frame in reversed(frames):
        if frame.filename in files:
            method = _enclosing_method(cls, frame)
            line = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
            return GraphBreakError(
                f"rollout(): {cls.__name__}.{method} breaks the compiled graph at "
                f"{frame.filename}:{frame.lineno}: `{line}` ({reason}); keep the four methods "
                f"to tensor code (no .item(), print, NumPy, Python branches on tensor values), "
                f"or call simulate() step by step"
            )
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return GraphBreakError(
        f"rollout(): the step breaks the compiled graph{where} ({reason}); the env must "
        f"provide reset_where(mask) and traceable step(), or call simulate() step by step"
    )


def _enclosing_method(cls: type, frame: traceback.FrameSummary) -> str:
    """The name of the method of ``cls`` (or a helper it calls) that holds ``frame``."""
    for name in _METHODS:
        code = getattr(getattr(cls, name, None), "__code__", None)
        if code is not None and code.co_filename == frame.filename and code.co_name == frame.name:
            return name
    return frame.name
