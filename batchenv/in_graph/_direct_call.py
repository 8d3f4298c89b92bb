"""Calls of a compiled CPU program that skip Dynamo once Dynamo has shown what a call does.

Every call of a ``torch.compile``-d function goes through Dynamo: its frame hook and guards,
the transformed bytecode that fetches the graph's inputs from the arguments' attributes, the
compiled graph, and bytecode that stores the graph's outputs back into attributes. For PPO's
rollout on CartPole (4 envs, 4 steps a program) that Python work was about half of a call,
and the fused C++ kernel under 5% (py-spy; benchmarks/RESULTS.md).

:class:`DirectProgram` learns a call from Dynamo and then makes it itself:

- **reads**: Dynamo names the source of each graph input (``L['algo'].params``,
  ``L['data']['observ']``); each is turned into an expression over the arguments, and kept
  only if it finds the very tensor Dynamo passed;
- **writes**: everything reachable from the arguments (attributes, dict entries, list and
  tuple items) is compared before and after the call; each changed entry must now hold a
  graph output, a graph input, a constant, or a dict, list or tuple of those;
- **result**: the same description of what the function returned.

Once two calls in a row give the same plan, later calls run it: fetch the inputs, call the
compiled graph, store its outputs, build the result. Like Dynamo with tensor-only guards (what
``compile_program`` uses), the plan keeps the Python values the program was traced with. A call
whose inputs differ from the recorded ones in type, dtype, device, shape, strides or
``requires_grad``, or that runs in another grad mode, goes through Dynamo again (which may
recompile) and the plan is learned anew. A program is never called directly when its graph
calls custom ops (their Python may change state that no output shows, e.g. a NumPy BatchEnv
stepped through ``batchenv::batch_env_step``), or when a call changes something the plan
cannot replay (an object it created, a deleted entry, more than ``_MAX_OBJECTS`` reachable
objects). This uses Dynamo's private names for graph-input sources; where they are missing,
every call goes through Dynamo as before.
"""

from __future__ import annotations

import inspect
import operator
import types
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

#: Objects reachable from a call's arguments that learning a plan will look at.
_MAX_OBJECTS = 20_000
#: Agreeing plans needed before calls go direct; plans tried (and plans dropped because
#: the inputs changed) before giving up.
_AGREEING_CALLS = 2
_MAX_TRIES = 6

_OPAQUE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    weakref.ReferenceType,
    torch.Tensor,
    torch.device,
    torch.dtype,
    torch.Generator,
)
_CONSTANTS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


class _CannotPlan(Exception):
    """This program's calls cannot be replayed without Dynamo (the message says why)."""


class DirectProgram:
    """``function`` compiled by Inductor with ``options``; repeated calls skip Dynamo.

    Args:
        function: the program (positional arguments only, as ``rollout()`` and PPO call it).
        options: Inductor options, as for ``torch.compile(options=...)``.
        guard_filter_fn: Dynamo's guard filter (``compile_program`` keeps tensor guards).
        inductor: False runs Dynamo's graph as it is (torch ops, no Inductor compile): for a
            program whose plan is only learned, to be run by a compiled loop (_scan_loop).

    ``direct_calls`` counts the calls that skipped Dynamo; ``refused`` says why none will.
    """

    def __init__(
        self,
        function: Callable,
        options: dict[str, Any],
        guard_filter_fn: Callable | None = None,
        inductor: bool = True,
    ):
        self._backend = _RecordingInductor(options) if inductor else _RecordingGraph()
        self._dynamo = torch._dynamo.optimize(
            backend=self._backend,
            nopython=True,
            dynamic=False,
            guard_filter_fn=guard_filter_fn,
        )(function)
        self._names = _positional_names(function)
        self._globals = getattr(function, "__globals__", {})
        self._plan: _Plan | None = None
        self._candidate: _Plan | None = None
        self._agreeing = 0
        self._tries = 0
        self._misses = 0
        self._previous: tuple = ([], [])  # the last learning call's graph inputs and outputs
        self.direct_calls = 0
        self.refused: str | None = None if self._names is not None else "keyword-only function"

    def __deepcopy__(self, memo: dict) -> DirectProgram:
        # Shared like the function torch.compile returns: a copied owner (a deep-copied PPO)
        # calls the same compiled program; its plan then misses and is learned again.
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        plan = self._plan
        if plan is not None and not kwargs:
            done, result = plan.run(args)
            if done:
                self.direct_calls += 1
                return result
            # Inputs changed: Dynamo decides (and may recompile), and the plan is learned anew.
            self._plan, self._candidate, self._agreeing, self._tries = None, None, 0, 0
            self._misses += 1
            if self._misses > _MAX_TRIES:
                self.refused = "its inputs kept changing"
        if self.refused is not None or kwargs or len(args) != len(self._names or ()):
            return self._dynamo(*args, **kwargs)
        return self._learn(args)

    def _learn(self, args: tuple) -> Any:
        """A call through Dynamo that also learns its plan; two in a row must agree, the
        second also on what the first's plan reads before the call."""
        try:
            before = _reachable(args)
        except _CannotPlan as why:
            self.refused = str(why)
            return self._dynamo(*args)
        candidate, expected = self._candidate, None
        if candidate is not None:
            try:
                expected = candidate.fetch(args)
            except Exception:  # a source that does not evaluate: this plan cannot serve
                expected = None
        grad = torch.is_grad_enabled()
        self._backend.last, self._backend.recording = None, True
        try:
            result = self._dynamo(*args)
        finally:
            self._backend.recording = False
        last, self._backend.last = self._backend.last, None
        try:
            plan = _Plan.learn(self, args, before, result, last, grad)
        except _CannotPlan as why:
            self.refused = str(why)
            return result
        inputs = last[1]
        if (
            candidate is not None
            and expected is not None
            and plan.same_as(candidate)
            and len(expected) == len(inputs)
            and all(a is b for a, b in zip(expected, inputs))
        ):
            self._agreeing += 1
        else:
            self._candidate, self._agreeing = plan, 1
            self._tries += 1
            if self._tries > _MAX_TRIES:
                self.refused = "its calls never agreed on a plan"
                self._candidate = None
                return result
        if self._agreeing >= _AGREEING_CALLS:
            plan.follow(self._previous, (inputs, last[2]))
            self._plan, self._candidate, self._previous = plan, None, ([], [])
        else:
            self._previous = (inputs, last[2])
        return result


#: Values taken as they are, never entered (a DirectProgram an argument holds, among them).
_LEAVES = (*_OPAQUE, *_CONSTANTS, DirectProgram)


class _RecordingInductor(torch._TorchCompileInductorWrapper):
    """Inductor as ``torch.compile`` runs it, with each compiled graph wrapped so that its
    last call (inputs and outputs) can be read back while a plan is learned."""

    def __init__(self, options: dict[str, Any]):
        super().__init__(None, options, False)
        self.recording = False
        self.last: tuple[_Graph, list, Any] | None = None

    def __call__(self, model_, inputs_, **kwargs):
        return _Graph(self, model_, super().__call__(model_, inputs_, **kwargs))


class _RecordingGraph:
    """A backend that runs Dynamo's graph as it is, recording like _RecordingInductor."""

    def __init__(self):
        self.recording = False
        self.last: tuple[_Graph, list, Any] | None = None

    def __call__(self, model_, inputs_, **kwargs):
        return _Graph(self, model_, model_.forward)


class _Graph:
    """One compiled graph: its inputs' sources as Dynamo named them, and the callable."""

    def __init__(self, backend, gm: torch.fx.GraphModule, compiled):
        self.backend = backend
        self.compiled = compiled
        self.entry: Callable[[list], Any] | None = None  # what a direct call runs; see call()
        # Dynamo's graph (torch ops), kept where it runs as it is: _scan_loop runs it in a loop.
        self.gm = gm if isinstance(backend, _RecordingGraph) else None
        self.sources: list[str | None] = []
        self.custom_ops: list[str] = []
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                grapharg = node.meta.get("grapharg")
                name = getattr(getattr(grapharg, "source", None), "name", None)
                self.sources.append(name() if callable(name) else name)
            elif node.op == "call_function" and isinstance(
                node.target, torch._ops.OpOverload | torch._ops.OpOverloadPacket
            ):
                if str(node.target).split(".", 1)[0] not in ("aten", "prims"):
                    self.custom_ops.append(str(node.target))

    def __call__(self, *args: Any) -> Any:
        inputs = list(args)
        outputs = self.compiled(*args)
        if self.backend.recording and self.backend.last is None:
            self.backend.last = (self, inputs, outputs)
        return outputs

    def call(self, inputs: list) -> Any:
        if self.entry is None:
            self.entry = _inductor_entry(self.compiled) or self.compiled_call
        return self.entry(inputs)

    def compiled_call(self, inputs: list) -> Any:
        return self.compiled(*inputs)


class _Plan:
    """What one call reads, writes and returns, as code that does it without Dynamo."""

    def __init__(self, graph, fetch, store, source, constants, meta, grad):
        self.graph, self.fetch, self.store = graph, fetch, store
        self.source, self.constants, self.grad = source, constants, grad
        self.meta = meta  # of the inputs: type, dtype, device, shape, strides, requires_grad
        # Where each input of a call usually comes from, as an index into the previous call's
        # outputs followed by its inputs, and those very tensors for the next call: an input
        # that is one of them needs no meta check (the same graph made it).
        self.pick: Callable[[list], tuple] | None = None
        self.indices: list[int] | None = None  # what pick takes, by position
        self.expected: tuple = ()

    def same_as(self, other: _Plan) -> bool:
        return (
            self.graph is other.graph
            and self.source == other.source
            and self.meta == other.meta
            and self.grad == other.grad
            and len(self.constants) == len(other.constants)
            and all(a is b or a == b for a, b in zip(self.constants, other.constants))
        )

    def run(self, args: tuple) -> tuple[bool, Any]:
        """``(True, result)`` after a direct call, ``(False, None)`` if it cannot serve one."""
        if torch.is_grad_enabled() != self.grad:
            return False, None
        try:
            inputs = self.fetch(args)
        except Exception:  # e.g. an attribute deleted since: Dynamo raises what it raises
            return False, None
        expected = self.expected
        if not all(map(operator.is_, inputs, expected)):
            for x, known, meta in zip(inputs, expected, self.meta):
                if x is not known and _meta(x) != meta:
                    return False, None
        outputs = self.graph.call(inputs)
        result = self.store(args, inputs, outputs, self.constants)
        self.expected = self.pick([*outputs, *inputs])
        return True, result

    def follow(self, previous: tuple[list, Any], current: tuple[list, Any]) -> None:
        """Learn where inputs come from, from two calls in a row ``(inputs, outputs)``."""
        (inputs, outputs), (now_inputs, now_outputs) = previous, current
        where = {id(x): j for j, x in reversed(list(enumerate([*outputs, *inputs])))}
        indices = [where.get(id(x), len(outputs) + i) for i, x in enumerate(now_inputs)]
        self.indices = indices
        self.pick = lambda values: tuple(values[k] for k in indices)
        if len(indices) > 1:
            self.pick = operator.itemgetter(*indices)
        self.expected = self.pick([*now_outputs, *now_inputs])

    @classmethod
    def learn(cls, program: DirectProgram, args, before, result, last, grad) -> _Plan:
        if last is None:
            raise _CannotPlan("no compiled graph ran")
        graph, inputs, outputs = last
        if graph.custom_ops:
            raise _CannotPlan(f"its graph calls custom ops ({', '.join(graph.custom_ops)})")
        if not isinstance(outputs, list | tuple):
            raise _CannotPlan("its graph did not return a list")
        if any(source is None for source in graph.sources):
            raise _CannotPlan("Dynamo gave no source for a graph input")
        if not all(isinstance(x, torch.Tensor) for x in inputs):
            raise _CannotPlan("a graph input is not a tensor")
        names = program._names
        env = {"G": program._globals}
        text = (
            f"def fetch(A):\n    L = dict(zip({tuple(names)!r}, A))\n"
            f"    return [{', '.join(graph.sources)}]"
        )
        try:
            exec(compile(text, "<direct_call fetch>", "exec"), env)
        except SyntaxError as error:  # a source name that is not an expression
            raise _CannotPlan(f"a graph input's source cannot be read ({error})") from error

        after = _reachable(args)
        writer = _Writer(inputs, outputs, before)
        for key, (obj, path, entries) in before.items():
            if isinstance(obj, np.ndarray | set | frozenset):  # compared by value
                if _changed_in_place(obj, entries):
                    raise _CannotPlan(f"the call changed {_expression(path)} in place")
                continue
            now = dict(_children(obj))
            changed = [
                step
                for step in [*entries, *(step for step in now if step not in entries)]
                if entries.get(step, _ABSENT) is not now.get(step, _ABSENT)
            ]
            if not changed:
                continue
            if key not in after or after[key][1] != path:
                raise _CannotPlan(f"the call changed {_expression(path)} and moved it")
            for step in changed:
                if step not in now:
                    raise _CannotPlan(f"the call deleted {_expression(path + (step,))}")
                writer.store(path + (step,), now[step])
        body = writer.lines + [f"    return {writer.value(result)}"]
        source = "def store(A, I, O, C):\n" + "\n".join(body)
        exec(compile(source, "<direct_call store>", "exec"), env)
        meta = tuple(_meta(x) for x in inputs)
        return cls(graph, env["fetch"], env["store"], source, writer.constants, meta, grad)


_ABSENT = object()


#: The names in the code of AOTAutograd's runtime wrapper when all it does around a compiled
#: graph is to bump the version counters of the inputs the graph mutates and to run it with
#: grad mode off: no aliased outputs to rebuild, no mutations to copy back, nothing detached.
_PLAIN_WRAPPER_NAMES = frozenset(
    {
        "_increment_version_",
        "torch",
        "is_grad_enabled",
        "_C",
        "_set_grad_enabled",
        "isinstance",
        "tuple",
        "list",
        "len",
        "AssertionError",
    }
)


def _inductor_entry(compiled: Callable) -> Callable[[list], Any] | None:
    """Inductor's entry point of ``compiled`` (what ``torch.compile``'s backend returned),
    called with the two effects of AOTAutograd's runtime wrapper done here; None where the
    wrappers do more than that, or are not the layers this was written against (torch 2.13).

    Skips ~6 us of wrappers a call (Dynamo's disable context, AOTAutograd's forward and its
    runtime wrapper): a fifth of a 4-step chunk of PPO's CartPole rollout.
    """
    from torch._inductor.output_code import CompiledFxGraph

    try:
        if not isinstance(_cell(compiled, "self"), torch._dynamo.eval_frame.DisableContext):
            return None
        forward = _cell(compiled, "fn")
        if _cell(forward, "params_buffers_flat"):  # lifted parameters would come first
            return None
        runtime = _cell(forward, "compiled_fn")
        if not hasattr(runtime, "__code__"):  # loaded from AOTAutograd's cache: one more layer
            runtime = runtime.compiled_fn
        wrapper = _cell(runtime, "_codegen_runtime_wrapper")
        graph = _cell(runtime, "_inner_compiled_fn")
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    if not set(wrapper.__code__.co_names) <= _PLAIN_WRAPPER_NAMES:
        return None
    if not isinstance(graph, CompiledFxGraph):  # compiled with the caches on: one more layer
        graph = getattr(graph, "compiled_fn", None)
    if not isinstance(graph, CompiledFxGraph) or not graph._boxed_call:
        return None
    entry = graph.current_callable
    if entry is None:
        return None
    entry = _cpp_entry(entry) or entry
    mutated = sorted(graph.mutated_input_idxs)
    increment_version = torch._C._increment_version  # takes a tuple
    pick = operator.itemgetter(*mutated) if len(mutated) > 1 else None
    if len(mutated) == 1:
        pick = lambda inputs: (inputs[mutated[0]],)  # noqa: E731
    is_grad_enabled, set_grad_enabled = torch._C.is_grad_enabled, torch._C._set_grad_enabled

    def call(inputs: list) -> Any:
        if pick is not None:
            increment_version(pick(inputs))
        if not is_grad_enabled():
            return entry(list(inputs))
        set_grad_enabled(False)
        try:
            return entry(list(inputs))
        finally:
            set_grad_enabled(True)

    return call


def _cpp_entry(entry: Callable) -> Callable[[list], Any] | None:
    """The C++ entry of Inductor's ``cpp_wrapper`` module (``entry``'s function ``f``), called
    without the Python wrapper's conversion of non-tensor arguments (a plan's inputs are all
    tensors); None where ``entry`` is not that wrapper."""
    code = getattr(entry, "__code__", None)
    aoti = getattr(torch._C, "_aoti", None)
    wanted = ("unsafe_alloc_void_ptrs_from_tensors", "alloc_tensors_by_stealing_from_void_ptrs")
    if code is None or code.co_freevars != ("f",) or aoti is None:
        return None
    if not set(wanted) <= set(code.co_names) or not all(hasattr(aoti, n) for n in wanted):
        return None
    cpp = _cell(entry, "f")
    to_handles, from_handles = (getattr(aoti, n) for n in wanted)

    def call(inputs: list) -> Any:
        return from_handles(cpp(to_handles(inputs)))

    return call


def _cell(function: Any, name: str) -> Any:
    """The value of ``function``'s closure variable ``name`` (KeyError where it has none)."""
    cells = zip(function.__code__.co_freevars, function.__closure__ or ())
    return {free: cell.cell_contents for free, cell in cells}[name]


class _Writer:
    """Python statements that store a call's changes; values as expressions over the graph
    inputs ``I``, outputs ``O`` and constants ``C``."""

    def __init__(self, inputs: list, outputs: Any, before: dict[int, tuple]):
        self.before = before  # containers that existed before the call, by id
        self.inputs = {id(x): i for i, x in enumerate(inputs)}
        self.outputs = {id(x): j for j, x in enumerate(outputs)}
        self.constants: list = []
        self.lines: list[str] = []

    def store(self, path: tuple, value: Any) -> None:
        target = _expression(path[:-1], self.constant)
        kind, key = path[-1]
        expr = self.value(value)
        if kind == "attr":
            self.lines.append(f"    setattr({target}, {self.constant(key)}, {expr})")
        elif kind == "item":
            self.lines.append(f"    {target}[{self.constant(key)}] = {expr}")
        else:
            raise _CannotPlan(f"the call changed {_expression(path)} in place")

    def value(self, value: Any) -> str:
        if isinstance(value, torch.Tensor):
            if id(value) in self.outputs:
                return f"O[{self.outputs[id(value)]}]"
            if id(value) in self.inputs:
                return f"I[{self.inputs[id(value)]}]"
            raise _CannotPlan("the call stored a tensor that is not a graph input or output")
        if isinstance(value, _CONSTANTS):
            return self.constant(value)
        if id(value) in self.before and not isinstance(value, tuple):
            raise _CannotPlan(f"the call stored an existing {type(value).__name__} elsewhere")
        if type(value) is dict:
            items = ", ".join(f"{self.constant(k)}: {self.value(v)}" for k, v in value.items())
            return "{" + items + "}"
        if type(value) is list:
            return "[" + ", ".join(self.value(v) for v in value) + "]"
        if type(value) is tuple:
            return "(" + "".join(self.value(v) + ", " for v in value) + ")"
        if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a NamedTuple
            return f"{self.constant(type(value))}(" + ", ".join(self.value(v) for v in value) + ")"
        raise _CannotPlan(f"the call made a {type(value).__name__}")

    def constant(self, value: Any) -> str:
        self.constants.append(value)
        return f"C[{len(self.constants) - 1}]"


def _reachable(args: tuple) -> dict[int, tuple]:
    """Every container reachable from ``args`` (objects' attributes and slots, dicts, lists,
    tuples), by id: ``(object, path, entries)``, ``path`` the first by which it was reached,
    ``entries`` its children (step -> value). NumPy arrays and sets count too, with a copy of
    their contents as entries; other values are leaves."""
    found: dict[int, tuple] = {}
    stack = [((("arg", i),), value) for i, value in reversed(list(enumerate(args)))]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _LEAVES) or id(value) in found:
            continue
        if len(found) >= _MAX_OBJECTS:
            raise _CannotPlan(f"more than {_MAX_OBJECTS} objects are reachable from its arguments")
        if isinstance(value, np.ndarray | set | frozenset):
            found[id(value)] = (value, path, _contents(value))
            continue
        entries = dict(_children(value))
        found[id(value)] = (value, path, entries)
        stack.extend((path + (step,), child) for step, child in reversed(entries.items()))
    return found


def _contents(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        if value.size > 100_000:
            raise _CannotPlan("a large NumPy array is reachable from its arguments")
        return value.copy()
    return frozenset(value)


def _changed_in_place(value: Any, contents: Any) -> bool:
    if isinstance(value, np.ndarray):
        try:
            return not np.array_equal(value, contents, equal_nan=value.dtype.kind in "fc")
        except TypeError:
            return not np.array_equal(value, contents)
    return isinstance(value, set) and frozenset(value) != contents


def _children(value: Any) -> Any:
    if isinstance(value, dict):
        yield from ((("item", key), child) for key, child in list(value.items()))
    elif isinstance(value, list | tuple):
        yield from ((("index", i), child) for i, child in enumerate(value))
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        yield from ((("attr", name), child) for name, child in list(attributes.items()))
    for cls in type(value).__mro__:
        for name in cls.__dict__.get("__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                yield ("attr", name), getattr(value, name)


def _expression(path: tuple, constant: Callable[[Any], str] = repr) -> str:
    """Python for a path: ``getattr(A[1], 'buffer')['observ']`` (names and keys written by
    ``constant``)."""
    text = ""
    for kind, key in path:
        if kind == "arg":
            text = f"A[{key}]"
        elif kind == "attr":
            text = f"getattr({text}, {constant(key)})"
        else:
            text = f"{text}[{constant(key)}]"
    return text


def _positional_names(function: Callable) -> tuple[str, ...] | None:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in kinds for p in parameters):
        return None
    return tuple(p.name for p in parameters)


def _meta(x: Any) -> tuple:
    if not isinstance(x, torch.Tensor):
        return (type(x),)
    return (type(x), x.dtype, x.device, x.shape, x.stride(), x.requires_grad)
