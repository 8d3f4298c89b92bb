"""sample_categorical: the Triton kernel draws from the target distribution (chi-square),
never picks an impossible category, is a pure function of (input, seed, offset), and falls
back to torch.multinomial where Triton cannot run.

Triton's interpreter is slow, so the statistical tests here use a few hundred draws (the
larger ones are marked slow). A kernel program samples a tile of rows (up to 128 of 5
categories); a row's draw does not depend on the tile it is in (see the first test).
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch

from batchenv.kernels import sampler as sampler_module
from batchenv.kernels.sampler import sample_categorical

TARGET = [0.1, 0.2, 0.3, 0.4]


def _chi_square_pvalue(draws: torch.Tensor, probs: list[float]) -> float:
    """p-value of the draws' counts against ``probs``; a zero-probability category must
    never be drawn (and is left out of the statistic)."""
    counts = torch.bincount(draws.flatten().cpu(), minlength=len(probs)).numpy()
    probs = np.asarray(probs)
    assert counts[probs == 0].sum() == 0, counts
    observed = counts[probs > 0].astype(np.float64)
    expected = probs[probs > 0] * counts.sum()
    statistic = float(((observed - expected) ** 2 / expected).sum())
    degrees = len(expected) - 1
    # The chi-square survival function: the regularised upper incomplete gamma function.
    return float(torch.special.gammaincc(torch.tensor(degrees / 2), torch.tensor(statistic / 2)))


def test_kernel_matches_target_distribution(triton_device):
    probs = torch.tensor(TARGET + [0.0], device=triton_device).expand(256, 5).contiguous()
    draws = sample_categorical(probs=probs, seed=11, offset=0)
    assert draws.dtype == torch.int64 and draws.shape == (256,)
    assert int((draws == 4).sum()) == 0  # zero probability: never drawn
    # Fixed seed: the p-value is a fixed number; a broken sampler (off-by-one bucket,
    # non-uniform u) gives p far below 1e-3 at this sample size.
    assert _chi_square_pvalue(draws, TARGET + [0.0]) > 1e-3
    assert _chi_square_pvalue(draws, [0.25, 0.25, 0.25, 0.25, 0.0]) < 1e-3  # the test has power
    # The Philox counter is (row, offset): the first rows of a smaller batch draw the same.
    assert torch.equal(draws[:16], sample_categorical(probs=probs[:16], seed=11, offset=0))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_kernel_chi_square_large(kind, triton_device):
    target = [0.05, 0.5, 0.05, 0.15, 0.25]
    weights = torch.tensor(target, device=triton_device)
    x = weights.log() if kind == "logits" else weights * 3.0  # unnormalised probs
    draws = torch.cat(
        [sample_categorical(**{kind: x.expand(400, 5)}, seed=5, offset=k) for k in range(3)]
    )
    assert _chi_square_pvalue(draws, target) > 1e-3


def test_logits_sample_softmax(triton_device):
    logits = torch.log(torch.tensor(TARGET, device=triton_device)) + 7.0  # shift-invariant
    logits = torch.cat((logits, torch.tensor([float("-inf")], device=triton_device)))
    draws = sample_categorical(logits=logits.expand(16, 16, 5), seed=2, offset=3)
    assert draws.shape == (16, 16)
    assert int((draws == 4).sum()) == 0
    assert _chi_square_pvalue(draws, TARGET + [0.0]) > 1e-3


def test_seed_and_offset_make_the_draws(triton_device):
    probs = torch.full((24, 6), 1.0, device=triton_device)
    a = sample_categorical(probs=probs, seed=1, offset=0)
    assert torch.equal(a, sample_categorical(probs=probs, seed=1, offset=0))
    assert not torch.equal(a, sample_categorical(probs=probs, seed=1, offset=1))
    assert not torch.equal(a, sample_categorical(probs=probs, seed=2, offset=0))
    assert torch.equal(a, sample_categorical(probs=probs, seed=1 + 2**64, offset=0))
    assert len(set(a.tolist())) >= 4  # rows draw independently, not one shared u


def test_out_argument_and_shapes(triton_device):
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]], device=triton_device)
    out = torch.full((2,), -1, dtype=torch.int64, device=triton_device)
    result = sample_categorical(probs=probs, seed=0, out=out)
    assert result is out and out.tolist() == [1, 2]
    empty = sample_categorical(probs=torch.ones(0, 3, device=triton_device), seed=0)
    assert empty.shape == (0,)
    single = sample_categorical(probs=torch.tensor([0.0, 0.0, 5.0], device=triton_device))
    assert single.shape == () and int(single) == 2


def test_argument_validation():
    with pytest.raises(ValueError, match="exactly one of logits= and probs= \\(got neither\\)"):
        sample_categorical()
    with pytest.raises(ValueError, match="got both"):
        sample_categorical(logits=torch.zeros(2), probs=torch.ones(2))
    with pytest.raises(ValueError, match="floating-point tensor"):
        sample_categorical(probs=torch.ones(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="must not be empty"):
        sample_categorical(probs=torch.ones(2, 0))
    with pytest.raises(
        ValueError, match="probs must be finite and >= 0 \\(first at flattened row 1"
    ):
        sample_categorical(probs=torch.tensor([[1.0, 0.0], [-1.0, 2.0]]))
    with pytest.raises(ValueError, match="a row of probs is all zero"):
        sample_categorical(probs=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="a row of logits is all -inf"):
        sample_categorical(logits=torch.full((2,), float("-inf")))
    with pytest.raises(ValueError, match="offset must be an int in \\[0, 2\\*\\*64\\)"):
        sample_categorical(probs=torch.ones(2), offset=-1)
    with pytest.raises(ValueError, match="out must be an int64 tensor of shape \\(2,\\)"):
        sample_categorical(probs=torch.ones(2, 3), out=torch.zeros(3, dtype=torch.int64))


def test_fallback_without_the_interpreter_matches_target(monkeypatch):
    """On CPU with the interpreter off the call uses torch.multinomial (reproducibly)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert sampler_module.unavailable_reason(sampler_module._sample_kernel, torch.device("cpu"))
    probs = torch.tensor(TARGET).expand(4000, 4)
    draws = sample_categorical(probs=probs, seed=4, offset=1)
    assert torch.equal(draws, sample_categorical(probs=probs, seed=4, offset=1))
    assert _chi_square_pvalue(draws, TARGET) > 1e-3


def test_docstring_examples_run(triton_device):
    result = doctest.testmod(sampler_module)
    assert result.attempted > 0 and result.failed == 0
