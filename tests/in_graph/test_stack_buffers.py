"""compile_program's CPU programs keep temporaries on the C stack, and only its programs do.

AOTInductor's ArrayRef wrapper, which allocates them there, returns an output that lives in
a stack array through a thread-local tensor that the next call overwrites. These tests pin
that every output stays the caller's own, and that other torch.compile calls in the process
keep Inductor's usual wrapper.
"""

from __future__ import annotations

import torch
from torch._inductor import config as inductor_config
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.cpp_wrapper_cpu_array_ref import CppWrapperCpuArrayRef

from batchenv.in_graph import _stack_buffers
from batchenv.in_graph.rollout import compile_program


def small_program(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A few steps of a recurrence, returned stacked (a view of one buffer, as rollout()'s
    ``done`` is), and the last step's sum (which may reuse a dead temporary's storage)."""
    steps = []
    for _ in range(5):
        x = torch.tanh(x * 1.5 - 0.25)
        steps.append(x)
    stacked = torch.stack(steps).reshape(5, -1)
    return stacked, (x * x).sum(-1) + 1.0


def test_outputs_are_not_overwritten_by_the_next_call():
    program = compile_program(small_program, "cpu")
    a, b = torch.linspace(-1, 1, 12).reshape(3, 4), torch.full((3, 4), 0.5)
    first = program(a)
    kept = [t.clone() for t in first]
    second = program(b)
    for got, want in zip(first, kept):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    for got, want in zip(first, small_program(a)):
        torch.testing.assert_close(got, want)
    for got, want in zip(second, small_program(b)):
        torch.testing.assert_close(got, want)
    assert all(x.data_ptr() != y.data_ptr() for x, y in zip(first, second))


def test_the_wrapper_is_chosen_per_program():
    assert _stack_buffers.enable_per_program_choice()
    cpu = _stack_buffers._chosen_wrapper
    # torch's default config: Inductor's usual wrapper, with loops' carried outputs distinct
    plain = cpu()
    assert issubclass(plain, CppWrapperCpu) and not issubclass(plain, CppWrapperCpuArrayRef)
    assert plain.codegen_subgraph_suffix is not CppWrapperCpu.codegen_subgraph_suffix
    with inductor_config.patch({_stack_buffers.OPTION: True}):
        chosen = cpu()
    assert issubclass(chosen, CppWrapperCpuArrayRef) and chosen is not CppWrapperCpuArrayRef
    # Class attributes Inductor reads before it builds a wrapper come from the chosen class.
    assert _stack_buffers._PerProgramCpuWrapper.supports_caching is CppWrapperCpu.supports_caching


def test_a_users_own_cpp_wrapper_program_is_unchanged():
    compile_program(small_program, "cpu")(torch.ones(2, 3))  # ours first, in this process
    mine = torch.compile(small_program, fullgraph=True, options={"cpp_wrapper": True})
    x = torch.arange(6.0).reshape(2, 3) / 6
    first = mine(x)
    kept = [t.clone() for t in first]
    mine(torch.zeros(2, 3))
    for got, want in zip(first, kept):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not inductor_config.aot_inductor.allow_stack_allocation


def test_a_loop_whose_carried_values_are_one_buffer_runs():
    """Two carried values that Inductor computes into one buffer (the same expression): its
    C++ loop moved the buffer into both slots and crashed on the next pass."""
    from torch._higher_order_ops.scan import scan

    assert _stack_buffers.enable_per_program_choice()

    def body(carry, x):
        a, b = carry
        total = a + x
        return [total.clone(), total.clone()], b.clone()  # without the fix: a segfault

    def program(a, b, xs):
        (a, b), seen = scan(body, [a, b], xs)
        return a, b, seen

    compiled = torch.compile(program, fullgraph=True, options={"cpp_wrapper": True})
    a, b, xs = torch.ones(3), torch.full((3,), 2.0), torch.arange(12.0).reshape(4, 3)
    for got, want in zip(compiled(a, b, xs), program(a, b, xs)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
