"""A whole rollout as one compiled loop: the one-step program's plan, run T times by torch's
``scan`` inside a single compiled C++ program.

``rollout(..., scan=True)`` on a CPU. Once :class:`~batchenv.in_graph._direct_call.DirectProgram`
has learned what one step reads, writes and returns (its *plan*: the graph's inputs by
source, where each of the next step's inputs comes from, what is stored where), the step is
a pure function of tensors:

- **carry**: the inputs that change from step to step: an input the next step takes from an
  output (``batch.score``), or one the graph changes in place (the algorithm's buffers, the
  env's state); each step works on copies of the latter, so no input is changed in place;
- **constants**: the inputs every step reads unchanged (parameters, keys);
- **per-step outputs**: what the step returns (``done`` and ``score``), stacked to ``[T]``.

``torch._higher_order_ops.scan`` runs that function T times, and Inductor compiles the loop
once: its body is one step's code (compile time of one step, not of T) and the loop runs in
C++, so a step costs no Python. After the loop, what the T steps changed is written back: a
changed-in-place input with ``copy_`` (the same tensor, as the steps leave it), the rest with
the plan's own stores.

A plan that stores an input somewhere else is refused (:attr:`ScanLoop.refused` says why),
as is a step DirectProgram cannot plan (custom ops, such as a NumPy BatchEnv's steps); the
rollouts then run in compiled chunks.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch._higher_order_ops.scan import scan

from batchenv.in_graph import _direct_call


class ScanLoop:
    """``steps`` steps of ``program``'s learned plan as one compiled loop.

    Args:
        program: the one-step DirectProgram, after its plan is learned.
        args: the arguments of its calls (``(batch, algo, 1, False)``).
        steps: T.
        options: Inductor options (those of ``compile_program``).
    """

    def __init__(self, program: _direct_call.DirectProgram, args: tuple, steps: int, options):
        plan = program._plan
        self.refused: str | None = None
        if plan is None or plan.indices is None or plan.graph.gm is None:
            self.refused = "the step's plan is not known"
            return
        if re.search(r"\bI\[", plan.source):
            self.refused = "a step stores one of its inputs elsewhere"
            return
        self.plan = plan
        inputs = plan.fetch(args)
        gm = plan.graph.gm
        copies = [x.clone() for x in inputs]
        versions = [x._version for x in copies]
        with torch.no_grad():
            outputs = list(gm(*copies))
        n_in, n_out = len(inputs), len(outputs)
        indices = plan.indices
        mutated = {i for i, x in enumerate(copies) if x._version != versions[i]}
        carry = [i for i in range(n_in) if indices[i] != n_out + i or i in mutated]
        constant = [i for i in range(n_in) if i not in carry]
        stored = {int(j) for j in re.findall(r"\bO\[(\d+)\]", plan.source)}
        result = _result_outputs(plan)
        fed = {indices[i] for i in carry if indices[i] < n_out}
        last = sorted(stored - fed - set(result))
        self.mutated, self.carry, self.constant = mutated, carry, constant
        self.last, self.result, self.n_out = last, result, n_out
        self.fed_from = {
            indices[i]: position for position, i in enumerate(carry) if indices[i] < n_out
        }
        self.last_like = [torch.empty_like(outputs[j]) for j in last]
        self.meta = tuple(_direct_call._meta(x) for x in inputs)

        count = len(carry) + len(last)

        def loop(*flat):
            constants = flat[count:-1]

            def body(state, _):
                values: list[Any] = [None] * n_in
                for i, x in zip(carry, state[: len(carry)]):
                    values[i] = x.clone() if i in mutated else x
                for i, x in zip(constant, constants):
                    values[i] = x
                step_outputs = list(gm(*values))
                every = step_outputs + values
                # A fresh tensor for every carried value: no carried value may alias an
                # input or another output (scan's rule).
                new = [every[indices[i]].clone() for i in carry]
                new += [step_outputs[j].clone() for j in last]
                return new, [step_outputs[j].clone() for j in result]

            final, per_step = scan(body, list(flat[:count]), flat[-1])
            return (*final, *per_step)

        self._xs = torch.zeros(steps, 1, device=inputs[0].device)
        self._compiled = torch.compile(loop, fullgraph=True, dynamic=False, options=options)

    def __call__(self, args: tuple) -> tuple[torch.Tensor, ...] | None:
        """Run the T steps; the per-step outputs stacked, or None where the inputs no
        longer look as they did when the loop was built."""
        plan = self.plan
        inputs = plan.fetch(args)
        if tuple(_direct_call._meta(x) for x in inputs) != self.meta:
            return None
        flat = [inputs[i] for i in self.carry] + self.last_like
        flat += [inputs[i] for i in self.constant] + [self._xs]
        with torch.no_grad():
            out = self._compiled(*flat)
        count = len(self.carry)
        final, last = out[:count], out[count : count + len(self.last)]
        per_step = out[count + len(self.last) :]
        for position, i in enumerate(self.carry):
            if i in self.mutated:
                inputs[i].copy_(final[position])
        outputs: list[Any] = [None] * self.n_out
        for j, position in self.fed_from.items():
            outputs[j] = final[position]
        for j, value in zip(self.last, last):
            outputs[j] = value
        for j, value in zip(self.result, per_step):
            outputs[j] = value[-1]
        plan.store(args, inputs, outputs, plan.constants)
        return tuple(per_step)


def _result_outputs(plan) -> list[int]:
    """The graph outputs that the call returns, in the order of ``store``'s return."""
    match = re.search(r"return \((.*)\)\s*$", plan.source.strip().splitlines()[-1])
    if match is None:
        return []
    return [int(j) for j in re.findall(r"O\[(\d+)\]", match.group(1))]
