"""IMPALA agents: shapes, LSTM resets, eval argmax, parameter counts, gradient flow."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from batchenv.algorithms.impala import losses
from batchenv.algorithms.impala.models import AtariNet, MLPAgent, ResNetAgent, forward_in

NUM_ACTIONS = 3
# Small frames keep the conv nets cheap; 36x36 is about the smallest the AtariNet convs take.
SHAPES = {"mlp": (4,), "atari": (2, 36, 36), "resnet": (2, 20, 20)}
# LSTM hidden size per agent kind.
LSTM_SIZES = {"mlp": 16 + NUM_ACTIONS + 1, "atari": 512 + NUM_ACTIONS + 1, "resnet": 256}


def make_agent(kind: str, use_lstm: bool) -> nn.Module:
    if kind == "mlp":
        return MLPAgent(SHAPES[kind], NUM_ACTIONS, hidden_sizes=(16, 16), use_lstm=use_lstm)
    if kind == "atari":
        return AtariNet(SHAPES[kind], NUM_ACTIONS, use_lstm=use_lstm)
    return ResNetAgent(SHAPES[kind], NUM_ACTIONS, use_lstm=use_lstm)


def make_inputs(
    kind: str, T: int, B: int, done: torch.Tensor | None = None, uint8: bool = False
) -> dict[str, torch.Tensor]:
    shape = (T, B, *SHAPES[kind])
    frame = torch.randint(0, 256, shape, dtype=torch.uint8) if uint8 else torch.randn(shape)
    return {
        "frame": frame,
        "reward": 3 * torch.randn(T, B),
        "done": torch.zeros(T, B, dtype=torch.bool) if done is None else done,
        "last_action": torch.randint(0, NUM_ACTIONS, (T, B)),
    }


KINDS = pytest.mark.parametrize("kind", ["mlp", "atari", "resnet"])
LSTM = pytest.mark.parametrize("use_lstm", [False, True], ids=["ff", "lstm"])


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@KINDS
@LSTM
@pytest.mark.parametrize("T, B", [(1, 1), (3, 2)], ids=["T=1,B=1", "T=3,B=2"])
def test_output_shapes(kind: str, use_lstm: bool, T: int, B: int) -> None:
    agent = make_agent(kind, use_lstm)
    outputs, state = agent(make_inputs(kind, T, B, uint8=kind != "mlp"), agent.initial_state(B))
    assert outputs["policy_logits"].shape == (T, B, NUM_ACTIONS)
    assert outputs["baseline"].shape == (T, B)
    assert outputs["action"].shape == (T, B) and outputs["action"].dtype == torch.int64
    assert ((outputs["action"] >= 0) & (outputs["action"] < NUM_ACTIONS)).all()
    if use_lstm:
        assert len(state) == 2
        assert all(s.shape == (1, B, LSTM_SIZES[kind]) for s in state)
    else:
        assert state == () and agent.initial_state(B) == ()


@KINDS
def test_empty_core_state_starts_from_zeros(kind: str) -> None:
    agent = make_agent(kind, use_lstm=True).eval()
    inputs = make_inputs(kind, T=2, B=3)
    from_empty, state_a = agent(inputs, ())
    from_zeros, state_b = agent(inputs, agent.initial_state(3))
    torch.testing.assert_close(from_empty["policy_logits"], from_zeros["policy_logits"])
    torch.testing.assert_close(state_a, state_b)


@pytest.mark.parametrize("kind", ["mlp", "atari"])
def test_lstm_state_resets_where_done(kind: str) -> None:
    agent = make_agent(kind, use_lstm=True).eval()
    T, B = 3, 2
    # A non-zero state from an earlier unroll.
    _, warm_state = agent(make_inputs(kind, T=4, B=B))
    assert warm_state[0].abs().sum() > 0

    # Row 0 starts a new episode at t=1; row 1 continues throughout.
    done = torch.zeros(T, B, dtype=torch.bool)
    done[1, 0] = True
    inputs = make_inputs(kind, T, B, done=done)
    outputs, _ = agent(inputs, warm_state)

    # Row 0 from t=1 on equals a fresh start on the same inputs ...
    fresh_inputs = {key: value[1:, :1] for key, value in inputs.items()}
    fresh, _ = agent(fresh_inputs, agent.initial_state(1))
    torch.testing.assert_close(outputs["policy_logits"][1:, :1], fresh["policy_logits"])
    torch.testing.assert_close(outputs["baseline"][1:, :1], fresh["baseline"])

    # ... and row 1 is not affected by row 0's reset.
    no_done_inputs = {**inputs, "done": torch.zeros(T, B, dtype=torch.bool)}
    continued, _ = agent(no_done_inputs, warm_state)
    torch.testing.assert_close(outputs["policy_logits"][:, 1], continued["policy_logits"][:, 1])
    # Without the reset, row 0 differs from the fresh start.
    assert not torch.allclose(continued["policy_logits"][1:, :1], fresh["policy_logits"])


def test_done_at_first_step_ignores_incoming_state() -> None:
    agent = make_agent("mlp", use_lstm=True).eval()
    inputs = make_inputs("mlp", T=2, B=2, done=torch.tensor([[True, True], [False, False]]))
    garbage = tuple(torch.randn_like(s) for s in agent.initial_state(2))
    a, _ = agent(inputs, garbage)
    b, _ = agent(inputs, agent.initial_state(2))
    torch.testing.assert_close(a["policy_logits"], b["policy_logits"])


@KINDS
@LSTM
def test_eval_mode_is_argmax(kind: str, use_lstm: bool) -> None:
    agent = make_agent(kind, use_lstm).eval()
    outputs, _ = agent(make_inputs(kind, T=3, B=2))
    assert torch.equal(outputs["action"], outputs["policy_logits"].argmax(-1))


def test_training_mode_samples() -> None:
    agent = make_agent("mlp", use_lstm=False).train()
    with torch.no_grad():
        agent.head.policy.weight.zero_()
        agent.head.policy.bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    outputs, _ = agent(make_inputs("mlp", T=200, B=50))
    frequencies = torch.bincount(outputs["action"].flatten(), minlength=3) / 10_000
    torch.testing.assert_close(frequencies, torch.tensor([0.2, 0.3, 0.5]), atol=0.02, rtol=0)
    assert not torch.equal(outputs["action"], outputs["policy_logits"].argmax(-1))


@pytest.mark.parametrize("kind", ["atari", "resnet"])
def test_uint8_frames_are_scaled(kind: str) -> None:
    agent = make_agent(kind, use_lstm=False).eval()
    inputs = make_inputs(kind, T=2, B=2, uint8=True)
    as_float = {**inputs, "frame": inputs["frame"].float() / 255.0}
    a, _ = agent(inputs)
    b, _ = agent(as_float)
    torch.testing.assert_close(a["policy_logits"], b["policy_logits"])


@pytest.mark.parametrize("kind", ["atari", "resnet"])
def test_conv_nets_run_channels_last_with_the_same_outputs_and_gradients(kind: str) -> None:
    """Conv weights are NHWC (faster convolutions); a contiguous-format copy agrees."""
    agent = make_agent(kind, use_lstm=False)
    convs = [m for m in agent.modules() if isinstance(m, nn.Conv2d)]
    assert convs and all(m.weight.is_contiguous(memory_format=torch.channels_last) for m in convs)
    reference = make_agent(kind, use_lstm=False)
    reference.load_state_dict(agent.state_dict())
    reference.to(memory_format=torch.contiguous_format)
    assert not convs[0].weight.is_contiguous()
    inputs = make_inputs(kind, T=2, B=3, uint8=True)
    outputs = [net.eval()(inputs)[0]["baseline"] for net in (agent, reference)]
    torch.testing.assert_close(outputs[0], outputs[1])
    for out in outputs:
        out.sum().backward()
    torch.testing.assert_close(convs[0].weight.grad, reference.torso[0][0].weight.grad)


@pytest.mark.parametrize("kind", ["atari", "resnet"])
def test_bf16_uint8_frames_cast_straight_to_bfloat16_match_float32_scaling(kind: str) -> None:
    """Under bf16 autocast uint8 frames go straight to bfloat16 (one copy instead of three);
    every pixel value 0..255 must still scale to what float32 ``v / 255`` rounds to."""
    agent = make_agent(kind, use_lstm=False).eval()
    inputs = make_inputs(kind, T=2, B=3, uint8=True)
    inputs["frame"].view(-1)[:256] = torch.arange(256, dtype=torch.uint8)
    as_float = {**inputs, "frame": inputs["frame"].float() / 255.0}
    outputs = [forward_in("bf16", agent, frames)[0] for frames in (inputs, as_float)]
    assert torch.equal(outputs[0]["policy_logits"], outputs[1]["policy_logits"])
    assert torch.equal(outputs[0]["baseline"], outputs[1]["baseline"])


def test_reward_is_clipped() -> None:
    agent = make_agent("mlp", use_lstm=False).eval()
    inputs = make_inputs("mlp", T=2, B=2)
    a, _ = agent({**inputs, "reward": torch.full((2, 2), 7.0)})
    b, _ = agent({**inputs, "reward": torch.ones(2, 2)})
    torch.testing.assert_close(a["baseline"], b["baseline"])


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def linear(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def conv(c_in: int, c_out: int, k: int) -> int:
    return c_in * c_out * k * k + c_out


def lstm(n_in: int, hidden: int) -> int:
    return 4 * hidden * (n_in + hidden) + 8 * hidden


def heads(n_in: int, actions: int) -> int:
    return linear(n_in, actions) + linear(n_in, 1)


@LSTM
def test_atari_net_parameter_count(use_lstm: bool) -> None:
    A = 6
    core = 512 + A + 1
    torso = conv(4, 32, 8) + conv(32, 64, 4) + conv(64, 64, 3) + linear(64 * 7 * 7, 512)
    expected = torso + heads(core, A) + (lstm(core, core) if use_lstm else 0)
    assert count(AtariNet((4, 84, 84), A, use_lstm=use_lstm)) == expected
    if not use_lstm:
        assert expected == 1_687_768  # MonoBeast's AtariNet on 4x84x84 (without the LSTM)


@LSTM
def test_resnet_parameter_count(use_lstm: bool) -> None:
    A = 6
    torso = 0
    c_in = 4
    for c in (16, 32, 32):
        torso += conv(c_in, c, 3) + 4 * conv(c, c, 3)
        c_in = c
    torso += linear(32 * 11 * 11, 256)  # 84 -> 42 -> 21 -> 11 after the three pools
    core = 256 + A + 1
    expected = torso + (lstm(core, 256) + heads(256, A) if use_lstm else heads(core, A))
    assert count(ResNetAgent((4, 84, 84), A, use_lstm=use_lstm)) == expected


def test_mlp_parameter_count() -> None:
    agent = MLPAgent((3, 2), num_actions=2, hidden_sizes=(64, 32))
    assert count(agent) == linear(6, 64) + linear(64, 32) + heads(32 + 2 + 1, 2)


def test_invalid_shapes() -> None:
    with pytest.raises(ValueError, match="channels-first"):
        AtariNet((84, 84), 4)
    with pytest.raises(ValueError, match="does not fit"):
        AtariNet((4, 20, 20), 4)
    agent = make_agent("mlp", use_lstm=False)
    with pytest.raises(ValueError, match=r"frame must be \[T, B, \*\(4,\)\]"):
        agent(make_inputs("mlp", 2, 3) | {"frame": torch.zeros(2, 3, 5)})
    with pytest.raises(ValueError, match="inputs\\['done'\\] must be"):
        agent(make_inputs("mlp", 2, 3) | {"done": torch.zeros(2, dtype=torch.bool)})
    with pytest.raises(ValueError, match="inputs lack \\['last_action'\\]"):
        inputs = make_inputs("mlp", 2, 3)
        del inputs["last_action"]
        agent(inputs)


@KINDS
def test_gradients_reach_every_parameter(kind: str) -> None:
    agent = make_agent(kind, use_lstm=True).train()
    T, B = 3, 2
    done = torch.zeros(T, B, dtype=torch.bool)
    done[0] = True
    outputs, _ = agent(make_inputs(kind, T, B, done=done))
    loss = losses.compute_policy_gradient_loss(
        outputs["policy_logits"], outputs["action"], torch.randn(T, B)
    ) + losses.compute_baseline_loss(torch.randn(T, B) - outputs["baseline"])
    loss.backward()
    for name, parameter in agent.named_parameters():
        assert parameter.grad is not None, name
        assert torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


@LSTM
def test_mlp_overfits_tiny_batch(use_lstm: bool) -> None:
    """A few Adam steps fit fixed baseline targets and push the policy to target actions."""
    agent = make_agent("mlp", use_lstm).train()
    T, B = 4, 4
    inputs = make_inputs("mlp", T, B)
    target_values = torch.randn(T, B)
    target_actions = torch.randint(0, NUM_ACTIONS, (T, B))
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-2)

    def loss_fn() -> torch.Tensor:
        outputs, _ = agent(inputs)
        baseline_loss = losses.compute_baseline_loss(target_values - outputs["baseline"])
        policy_loss = losses.compute_policy_gradient_loss(
            outputs["policy_logits"], target_actions, torch.ones(T, B)
        )
        return baseline_loss + policy_loss

    initial = loss_fn().item()
    for _ in range(60):
        optimizer.zero_grad()
        loss_fn().backward()
        optimizer.step()
    assert loss_fn().item() < 0.1 * initial
    outputs, _ = agent.eval()(inputs)
    assert (outputs["action"] == target_actions).float().mean() > 0.9


@pytest.mark.parametrize("kind", ["mlp", "atari"])
def test_float64_agent(kind: str) -> None:
    agent = make_agent(kind, use_lstm=True).double()
    outputs, state = agent(make_inputs(kind, T=2, B=2, uint8=kind == "atari"))
    assert outputs["policy_logits"].dtype == torch.float64
    assert state[0].dtype == torch.float64


def test_docstring_examples() -> None:
    import doctest

    from batchenv.algorithms.impala import models as module

    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
