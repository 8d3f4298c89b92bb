"""StreamingNormalize against NumPy statistics of the whole stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from batchenv.algorithms.batchppo import StreamingNormalize


def _stream(rng, sizes, shape):
    return [rng.normal(3.0, 2.0, size=(size, *shape)).astype(np.float32) for size in sizes]


@pytest.mark.parametrize("shape", [(), (3,)], ids=["scalar", "vector"])
def test_statistics_match_numpy_over_a_stream(shape):
    rng = np.random.default_rng(0)
    batches = _stream(rng, [1, 7, 1, 1000, 30], shape)
    norm = StreamingNormalize(shape)
    for batch in batches:
        norm.update(torch.from_numpy(batch))
    data = np.concatenate(batches).astype(np.float64)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(norm.variance().numpy(), data.var(0, ddof=1), rtol=1e-10)
    np.testing.assert_allclose(norm.std().numpy(), np.sqrt(data.var(0, ddof=1) + 1e-4))
    assert int(norm.count) == len(data)


def test_observation_transform_centres_scales_and_clips():
    rng = np.random.default_rng(1)
    data = rng.normal(-2.0, 0.5, size=(500, 4)).astype(np.float32)
    norm = StreamingNormalize((4,), clip=5.0)
    norm.update(torch.from_numpy(data))
    probe = np.concatenate([data[:10], np.full((1, 4), 100.0, np.float32)])
    expected = (probe - data.mean(0)) / np.sqrt(data.astype(np.float64).var(0, ddof=1) + 1e-4)
    out = norm.transform(torch.from_numpy(probe))
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), np.clip(expected, -5, 5), rtol=1e-5, atol=1e-5)
    assert out[-1].eq(5.0).all()


def test_reward_transform_only_scales():
    norm = StreamingNormalize((), center=False, clip=10.0)
    rewards = torch.tensor([1.0, 3.0, 5.0, 7.0])
    norm.update(rewards)
    std = np.sqrt(np.var([1, 3, 5, 7], ddof=1) + 1e-4)
    np.testing.assert_allclose(
        norm.transform(rewards).numpy(), [1 / std, 3 / std, 5 / std, 7 / std], rtol=1e-6
    )
    constant = StreamingNormalize((), center=False, clip=10.0)
    constant.update(torch.ones(100))  # std = sqrt(0 + 1e-4) = 0.01: clipped
    assert constant.transform(torch.ones(1)).item() == 10.0


def test_no_scaling_before_two_samples():
    norm = StreamingNormalize((2,))
    x = torch.tensor([[4.0, -6.0]])
    assert torch.equal(norm.transform(x), x)  # nothing seen: identity
    norm.update(x)
    assert torch.equal(norm.transform(x), torch.zeros(1, 2))  # centred, not yet scaled


def test_state_dict_round_trip():
    norm = StreamingNormalize((3,), clip=5.0)
    norm.update(torch.randn(50, 3, generator=torch.Generator().manual_seed(0)))
    other = StreamingNormalize((3,), clip=5.0)
    other.load_state_dict(norm.state_dict())
    probe = torch.randn(5, 3)
    assert torch.equal(other.transform(probe), norm.transform(probe))
    assert set(norm.state_dict()) == {"count", "mean", "m2"}


def test_transform_follows_every_change_of_the_statistics():
    """transform() keeps its divisor between calls: it must still see each update() and a
    load_state_dict() made after a transform()."""
    rng = np.random.default_rng(1)
    first, second = (torch.as_tensor(batch) for batch in _stream(rng, [50, 50], (2,)))
    probe = torch.tensor([[4.0, -1.0]])
    norm = StreamingNormalize((2,))
    assert torch.equal(norm.transform(probe), probe)  # no samples yet: mean 0, std 1
    norm.update(first)
    after_first = norm.transform(probe)
    norm.update(second)
    data = torch.cat((first, second)).double()
    expected = (probe - data.mean(0)) / torch.sqrt(data.var(0) + 1e-4)
    torch.testing.assert_close(norm.transform(probe), expected.float())
    assert not torch.allclose(after_first, norm.transform(probe))

    fresh = StreamingNormalize((2,))
    fresh.transform(probe)  # its divisor is 1 now
    fresh.load_state_dict(norm.state_dict())
    torch.testing.assert_close(fresh.transform(probe), expected.float())
