"""The learner step: MonoBeast's loss on the shifted slot layout, RMSprop, clipping, schedule."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from batchenv.algorithms.impala import losses, vtrace
from batchenv.algorithms.impala.config import ImpalaConfig
from batchenv.algorithms.impala.learner import learn, make_optimizer
from batchenv.algorithms.impala.models import MLPAgent

T, B, A = 6, 3, 4


def _batch(seed: int = 0, reward_scale: float = 3.0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    done = torch.rand(T + 1, B, generator=generator) < 0.2
    action = torch.randint(0, A, (T + 1, B), generator=generator)
    return {
        "frame": torch.randn(T + 1, B, 5, generator=generator),
        "reward": reward_scale * torch.randn(T + 1, B, generator=generator),
        "done": done,
        "last_action": action,
        "action": action,
        "policy_logits": torch.randn(T + 1, B, A, generator=generator),
    }


def _expected_loss(model: nn.Module, batch: dict, config: ImpalaConfig) -> torch.Tensor:
    """MonoBeast's learn(), written out: outputs[:-1] against batch[1:]."""
    outputs, _ = model(batch)
    rewards = batch["reward"][1:]
    if config.reward_clipping == "abs_one":
        rewards = rewards.clamp(-1, 1)
    returns = vtrace.from_logits(
        behavior_policy_logits=batch["policy_logits"][1:],
        target_policy_logits=outputs["policy_logits"][:-1],
        actions=batch["action"][1:],
        discounts=(~batch["done"][1:]).float() * config.discount,
        rewards=rewards,
        values=outputs["baseline"][:-1],
        bootstrap_value=outputs["baseline"][-1],
    )
    logits = outputs["policy_logits"][:-1]
    return (
        losses.compute_policy_gradient_loss(logits, batch["action"][1:], returns.pg_advantages)
        + config.baseline_cost * losses.compute_baseline_loss(returns.vs - outputs["baseline"][:-1])
        + config.entropy_cost * losses.compute_entropy_loss(logits)
    )


@pytest.mark.parametrize("clipping", ["abs_one", "none"])
def test_learn_matches_monobeast_step(clipping: str) -> None:
    torch.manual_seed(0)
    config = ImpalaConfig(unroll_length=T, batch_size=B, reward_clipping=clipping)
    model = MLPAgent((5,), A)
    reference = copy.deepcopy(model)
    batch = _batch()

    optimizer, scheduler = make_optimizer(model, config)
    stats = learn(model, batch, (), optimizer, scheduler, config)

    loss = _expected_loss(reference, batch, config)
    assert stats["total_loss"] == pytest.approx(loss.item(), rel=1e-5)
    reference_optimizer = torch.optim.RMSprop(
        reference.parameters(), lr=4.8e-4, alpha=0.99, eps=0.01, momentum=0.0
    )
    loss.backward()
    norm = nn.utils.clip_grad_norm_(reference.parameters(), 40.0)
    reference_optimizer.step()
    assert stats["grad_norm"] == pytest.approx(float(norm), rel=1e-5)
    for mine, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(mine, theirs)


def test_bf16_learn_keeps_float32_weights_and_follows_the_float32_step() -> None:
    # Autocast runs the forward pass in bfloat16 (3 significant digits); V-trace, the
    # losses, the gradients and the weights stay float32, and the step lands close to the
    # float32 one.
    torch.manual_seed(0)
    config = ImpalaConfig(unroll_length=T, batch_size=B)
    model = MLPAgent((5,), A, use_lstm=True)
    reference, initial = copy.deepcopy(model), copy.deepcopy(model)
    batch = _batch()
    core = model.initial_state(B)
    stats = learn(
        model, batch, core, *make_optimizer(model, config), config.replace(precision="bf16")
    )
    expected = learn(reference, batch, core, *make_optimizer(reference, config), config)
    assert stats["total_loss"] == pytest.approx(expected["total_loss"], rel=0.05)
    assert stats["grad_norm"] == pytest.approx(expected["grad_norm"], rel=0.05)
    for parameter in model.parameters():
        assert parameter.dtype == torch.float32 and parameter.grad.dtype == torch.float32
    before = nn.utils.parameters_to_vector(initial.parameters())
    step = nn.utils.parameters_to_vector(model.parameters()) - before
    expected_step = nn.utils.parameters_to_vector(reference.parameters()) - before
    assert torch.cosine_similarity(step, expected_step, dim=0) > 0.95
    assert step.norm().item() == pytest.approx(expected_step.norm().item(), rel=0.1)
    with pytest.raises(ValueError, match="precision must be one of"):
        config.replace(precision="fp16")


def test_reward_clipping_changes_the_loss_only_for_large_rewards() -> None:
    torch.manual_seed(0)
    model = MLPAgent((5,), A)
    small = _batch(reward_scale=0.1)
    small["reward"] = small["reward"].clamp(-0.9, 0.9)
    for batch, same in ((small, True), (_batch(reward_scale=5.0), False)):
        clipped = _expected_loss(model, batch, ImpalaConfig(reward_clipping="abs_one"))
        raw = _expected_loss(model, batch, ImpalaConfig(reward_clipping="none"))
        assert torch.isclose(clipped, raw).item() is same


def test_learning_rate_decays_linearly_to_zero() -> None:
    config = ImpalaConfig(unroll_length=T, batch_size=B, total_steps=4 * T * B)
    model = MLPAgent((5,), A)
    optimizer, scheduler = make_optimizer(model, config)
    rates = [
        learn(model, _batch(k), (), optimizer, scheduler, config)["learning_rate"] for k in range(6)
    ]
    assert rates == pytest.approx([4.8e-4, 3.6e-4, 2.4e-4, 1.2e-4, 0.0, 0.0])


def test_gradient_norm_is_clipped_to_40() -> None:
    torch.manual_seed(0)
    config = ImpalaConfig(reward_clipping="none")
    model = MLPAgent((5,), A)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    before = [p.detach().clone() for p in model.parameters()]
    stats = learn(model, _batch(reward_scale=1000.0), (), optimizer, None, config)
    assert stats["grad_norm"] > 40.0  # the norm before clipping
    step = torch.sqrt(sum(((p - b) ** 2).sum() for p, b in zip(model.parameters(), before)))
    assert step.item() == pytest.approx(40.0, rel=1e-4)  # SGD with lr 1 moves by the gradient


def test_lstm_learner_uses_the_initial_core_state() -> None:
    torch.manual_seed(0)
    config = ImpalaConfig(unroll_length=T, batch_size=B)
    model = MLPAgent((5,), A, use_lstm=True)
    batch = _batch()
    batch["done"][:] = False
    state = tuple(torch.randn(1, B, s.shape[-1]) for s in model.initial_state(B))
    totals = []
    for initial in (state, ()):
        copied = copy.deepcopy(model)
        optimizer, scheduler = make_optimizer(copied, config)
        totals.append(learn(copied, batch, initial, optimizer, scheduler, config)["total_loss"])
    assert totals[0] != pytest.approx(totals[1])


def test_learn_rejects_bad_batches() -> None:
    config = ImpalaConfig()
    model = MLPAgent((5,), A)
    optimizer, scheduler = make_optimizer(model, config)
    batch = _batch()
    del batch["policy_logits"]
    with pytest.raises(ValueError, match=r"learn: the batch lacks \['policy_logits'\]"):
        learn(model, batch, (), optimizer, scheduler, config)
    short = {key: value[:1] for key, value in _batch().items()}
    with pytest.raises(ValueError, match=r"must be \[T \+ 1, B\] with T >= 1, got reward \(1, 3\)"):
        learn(model, short, (), optimizer, scheduler, config)


def test_docstring_examples() -> None:
    import doctest

    from batchenv.algorithms.impala import learner as module

    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
