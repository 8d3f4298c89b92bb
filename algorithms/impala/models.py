"""IMPALA agents: an MLP for vector observations, the shallow Atari net, the deep ResNet and
the MinAtar net.

Every agent is a torso (observation -> features) followed by one shared core-and-heads block:
the features are concatenated with the clipped reward and the one-hot last action, optionally
run through a one-layer LSTM, and read out by a policy head and a baseline head. All agents
share TorchBeast's forward signature::

    outputs, core_state = agent(inputs, core_state)

with ``inputs`` a dict of time-major tensors

- ``"frame"``: ``[T, B, *observation_shape]`` (uint8 frames are scaled by 1/255 inside, bool
  frames become 0.0 / 1.0; the MinAtar net takes its 0/1 cells as they are, bool or uint8),
- ``"reward"``: ``[T, B]`` (clipped to [-1, 1] inside),
- ``"done"``: ``[T, B]`` (True where ``frame`` is the first of a new episode; the LSTM state
  is zeroed before that step),
- ``"last_action"``: ``[T, B]`` integer actions taken before ``frame``,

and ``outputs`` a dict with ``"policy_logits"`` ``[T, B, A]``, ``"baseline"`` ``[T, B]`` and
``"action"`` ``[T, B]`` (sampled in training mode, argmax in eval mode). ``core_state`` is
``()`` without an LSTM and ``(h, c)``, each ``[1, B, hidden]``, with one; pass ``()`` or
``agent.initial_state(B)`` to start from zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["AtariNet", "CoreState", "MLPAgent", "MinAtarNet", "ResNetAgent", "forward_in"]

CoreState = tuple[torch.Tensor, ...]
"""Recurrent state: ``()`` for feed-forward agents, ``(h, c)`` each ``[1, B, hidden]``."""

_INPUT_KEYS = ("frame", "reward", "done", "last_action")


def _flat_size(torso: nn.Module, observation_shape: tuple[int, ...], name: str) -> int:
    """Number of features ``torso`` makes from one observation (found by a dummy forward)."""
    try:
        with torch.no_grad():
            out = torso(torch.zeros(1, *observation_shape))
    except RuntimeError as error:
        raise ValueError(
            f"{name}: observation_shape {observation_shape} does not fit the network's "
            f"convolutions ({error}); use larger frames, channels first (C, H, W)"
        ) from error
    return out[0].numel()


def _check_conv_shape(name: str, observation_shape: tuple[int, ...]) -> None:
    if len(observation_shape) != 3:
        raise ValueError(
            f"{name}: observation_shape must be channels-first (C, H, W), got {observation_shape}; "
            "stack or transpose frames first (e.g. Gymnasium AtariPreprocessing + FrameStack)"
        )


class _CoreAndHeads(nn.Module):
    """Features + clipped reward + one-hot last action -> optional LSTM -> policy, baseline."""

    def __init__(self, feature_size: int, num_actions: int, lstm_size: int | None) -> None:
        super().__init__()
        self.num_actions = num_actions
        core_input_size = feature_size + num_actions + 1
        self.core: nn.LSTM | None = None
        core_output_size = core_input_size
        if lstm_size is not None:
            self.core = nn.LSTM(core_input_size, lstm_size, num_layers=1)
            core_output_size = lstm_size
        self.policy = nn.Linear(core_output_size, num_actions)
        self.baseline = nn.Linear(core_output_size, 1)

    def initial_state(self, batch_size: int) -> CoreState:
        if self.core is None:
            return ()
        weight = self.policy.weight
        shape = (self.core.num_layers, batch_size, self.core.hidden_size)
        return tuple(torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in range(2))

    def forward(
        self,
        features: torch.Tensor,
        inputs: dict[str, torch.Tensor],
        core_state: CoreState,
        time: int,
        batch: int,
    ) -> tuple[dict[str, torch.Tensor], CoreState]:
        last_action = inputs["last_action"].reshape(time * batch).long()
        one_hot_last_action = F.one_hot(last_action, self.num_actions).to(features.dtype)
        clipped_reward = inputs["reward"].reshape(time * batch, 1).to(features.dtype).clamp(-1, 1)
        core_input = torch.cat([features, clipped_reward, one_hot_last_action], dim=-1)

        if self.core is None:
            core_output = core_input
            core_state = ()
        else:
            if len(core_state) == 0:
                core_state = self.initial_state(batch)
            core_input = core_input.view(time, batch, -1)
            notdone = (~inputs["done"].bool()).to(features.dtype)
            core_outputs = []
            for step_input, step_notdone in zip(core_input.unbind(0), notdone.unbind(0)):
                # Zero the state of rows whose episode starts at this step.
                mask = step_notdone.view(1, -1, 1)
                core_state = tuple(mask * state for state in core_state)
                output, core_state = self.core(step_input.unsqueeze(0), core_state)
                core_outputs.append(output)
            core_output = torch.cat(core_outputs).flatten(0, 1)

        policy_logits = self.policy(core_output)
        baseline = self.baseline(core_output)
        if self.training:
            action = torch.multinomial(F.softmax(policy_logits, dim=-1), num_samples=1)
        else:
            action = torch.argmax(policy_logits, dim=-1)
        outputs = {
            "policy_logits": policy_logits.view(time, batch, self.num_actions),
            "baseline": baseline.view(time, batch),
            "action": action.view(time, batch),
        }
        return outputs, core_state


def forward_in(
    precision: str, model: nn.Module, inputs: dict[str, torch.Tensor], core_state: CoreState = ()
) -> tuple[dict[str, torch.Tensor], CoreState]:
    """``model(inputs, core_state)`` with its matmuls and convolutions in ``precision``
    ('fp32' or 'bf16', through ``torch.autocast``); float outputs and state come back as
    float32, so rollout buffers, V-trace and losses never see bfloat16."""
    if precision == "fp32":
        return model(inputs, core_state)
    if precision != "bf16":
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
    device_type = next(model.parameters()).device.type
    with torch.autocast(device_type, dtype=torch.bfloat16):
        outputs, core_state = model(inputs, core_state)
    outputs = {
        key: value.float() if value.is_floating_point() else value for key, value in outputs.items()
    }
    return outputs, tuple(state.float() for state in core_state)


def _agent_forward(
    name: str,
    observation_shape: tuple[int, ...],
    torso: nn.Module,
    head: _CoreAndHeads,
    inputs: dict[str, torch.Tensor],
    core_state: CoreState,
    frames_last: bool = False,
    pixels: bool = True,
) -> tuple[dict[str, torch.Tensor], CoreState]:
    """Validate ``inputs``, run ``torso`` on the ``[T * B, ...]`` frames, then ``head``.
    ``frames_last``: the frames are ``(H, W, C)`` and reach ``torso`` as ``(C, H, W)``.
    ``pixels``: uint8 frames are pixels (0..255, scaled by 1/255); False: they are taken
    as they are (MinAtar's 0/1 cells, which its gym ids declare as uint8)."""
    missing = [key for key in _INPUT_KEYS if key not in inputs]
    if missing:
        raise ValueError(f"{name}.forward: inputs lack {missing}; expected keys {_INPUT_KEYS}")
    frame = inputs["frame"]
    if frame.dim() < 2 or tuple(frame.shape[2:]) != observation_shape:
        raise ValueError(
            f"{name}.forward: frame must be [T, B, *{observation_shape}], got {tuple(frame.shape)}"
        )
    time, batch = frame.shape[:2]
    for key in _INPUT_KEYS[1:]:
        if tuple(inputs[key].shape) != (time, batch):
            raise ValueError(
                f"{name}.forward: inputs[{key!r}] must be [T, B] = {(time, batch)}, "
                f"got {tuple(inputs[key].shape)}"
            )
    dtype = head.policy.weight.dtype
    if torch.is_autocast_enabled(frame.device.type):
        # Straight to the dtype the first layer computes in: casting uint8 frames to float32
        # first, then autocast casting them to bfloat16, made three full copies of the batch.
        dtype = torch.get_autocast_dtype(frame.device.type)
    x = frame.reshape(time * batch, *observation_shape)
    if frames_last:
        # A view: (H, W, C) rows seen as (C, H, W) already have channels-last strides.
        x = x.permute(0, 3, 1, 2)
    # Channels-last (NHWC) frames, like the conv weights: convolutions and their gradients
    # run ~15-30% faster that way on CPU (and use tensor cores on GPU). Converting the uint8
    # frames moves a quarter of the bytes of converting floats.
    if x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    x = x.to(dtype).div_(255.0) if pixels and x.dtype == torch.uint8 else x.to(dtype)
    features = torso(x)
    return head(features, inputs, core_state, time, batch)


class _Agent(nn.Module):
    """What the agents here share: ``observation_shape``, a ``torso`` (set by the subclass)
    on the ``[T * B, ...]`` frames, and the core and heads (``head``, a ``_CoreAndHeads``).
    ``frames_last``: frames are ``(H, W, C)``; ``pixels``: uint8 frames are 0..255 pixels
    (see :func:`_agent_forward`)."""

    frames_last: bool = False
    pixels: bool = True
    torso: nn.Module
    head: _CoreAndHeads

    def __init__(self, observation_shape: Sequence[int], num_actions: int, use_lstm: bool):
        super().__init__()
        self.observation_shape = tuple(int(d) for d in observation_shape)
        self.num_actions = int(num_actions)
        self.use_lstm = use_lstm

    def initial_state(self, batch_size: int) -> CoreState:
        """Zero recurrent state for ``batch_size`` rows (``()`` without an LSTM)."""
        return self.head.initial_state(batch_size)

    def forward(
        self, inputs: dict[str, torch.Tensor], core_state: CoreState = ()
    ) -> tuple[dict[str, torch.Tensor], CoreState]:
        """See the module docstring for the inputs and outputs."""
        return _agent_forward(
            type(self).__name__,
            self.observation_shape,
            self.torso,
            self.head,
            inputs,
            core_state,
            frames_last=self.frames_last,
            pixels=self.pixels,
        )


class MLPAgent(_Agent):
    """Feed-forward (optionally recurrent) agent for vector observations.

    Torso: flatten, then ``Linear + ReLU`` per entry of ``hidden_sizes``. With ``use_lstm`` the
    core is a one-layer LSTM whose hidden size equals its input size
    (``hidden_sizes[-1] + num_actions + 1``).

    Example:
        >>> import torch
        >>> agent = MLPAgent((4,), num_actions=2)
        >>> T, B = 3, 5
        >>> inputs = {"frame": torch.zeros(T, B, 4), "reward": torch.zeros(T, B),
        ...           "done": torch.zeros(T, B, dtype=torch.bool),
        ...           "last_action": torch.zeros(T, B, dtype=torch.long)}
        >>> outputs, state = agent(inputs)
        >>> tuple(outputs["policy_logits"].shape), tuple(outputs["action"].shape), state
        ((3, 5, 2), (3, 5), ())
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        num_actions: int,
        hidden_sizes: Sequence[int] = (64, 64),
        use_lstm: bool = False,
    ) -> None:
        super().__init__(observation_shape, num_actions, use_lstm)
        layers: list[nn.Module] = [nn.Flatten()]
        size = 1
        for d in self.observation_shape:
            size *= d
        for hidden in hidden_sizes:
            layers += [nn.Linear(size, hidden), nn.ReLU()]
            size = hidden
        self.torso = nn.Sequential(*layers)
        core_input_size = size + self.num_actions + 1
        self.head = _CoreAndHeads(size, self.num_actions, core_input_size if use_lstm else None)


class AtariNet(_Agent):
    """The shallow IMPALA network (TorchBeast MonoBeast's ``AtariNet``).

    Torso on ``(C, H, W)`` frames: conv 32 8x8 stride 4, conv 64 4x4 stride 2, conv 64 3x3
    stride 1 (ReLU after each), fully connected 512 + ReLU. With ``use_lstm`` the core is a
    one-layer LSTM whose hidden size equals its input size (``512 + num_actions + 1``).

    Example:
        >>> import torch
        >>> net = AtariNet((4, 84, 84), num_actions=6, use_lstm=True)
        >>> inputs = {"frame": torch.zeros(2, 3, 4, 84, 84, dtype=torch.uint8),
        ...           "reward": torch.zeros(2, 3), "done": torch.ones(2, 3, dtype=torch.bool),
        ...           "last_action": torch.zeros(2, 3, dtype=torch.long)}
        >>> outputs, (h, c) = net(inputs, net.initial_state(3))
        >>> tuple(outputs["baseline"].shape), tuple(h.shape)
        ((2, 3), (1, 3, 519))
    """

    def __init__(
        self, observation_shape: Sequence[int], num_actions: int, use_lstm: bool = False
    ) -> None:
        super().__init__(observation_shape, num_actions, use_lstm)
        _check_conv_shape("AtariNet", self.observation_shape)
        convs = nn.Sequential(
            nn.Conv2d(self.observation_shape[0], 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        conv_size = _flat_size(convs, self.observation_shape, "AtariNet")
        self.torso = nn.Sequential(convs, nn.Linear(conv_size, 512), nn.ReLU())
        core_input_size = 512 + self.num_actions + 1
        self.head = _CoreAndHeads(512, self.num_actions, core_input_size if use_lstm else None)
        self.to(memory_format=torch.channels_last)  # conv weights NHWC, see _agent_forward


class _ResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))`` with 3x3 same-padding convolutions."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, stride=1, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, stride=1, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class ResNetAgent(_Agent):
    """The deep IMPALA network (Espeholt et al. 2018, Fig. 3; TorchBeast PolyBeast's ``Net``).

    Torso on ``(C, H, W)`` frames: three sections with 16, 32, 32 channels, each a 3x3 conv,
    a 3x3 max-pool with stride 2 and two residual blocks; then ReLU, fully connected 256 +
    ReLU. With ``use_lstm`` the core is a one-layer LSTM with 256 hidden units.

    Example:
        >>> import torch
        >>> net = ResNetAgent((4, 84, 84), num_actions=6).eval()
        >>> inputs = {"frame": torch.zeros(1, 2, 4, 84, 84, dtype=torch.uint8),
        ...           "reward": torch.zeros(1, 2), "done": torch.zeros(1, 2, dtype=torch.bool),
        ...           "last_action": torch.zeros(1, 2, dtype=torch.long)}
        >>> outputs, _ = net(inputs)
        >>> tuple(outputs["action"].shape)
        (1, 2)
    """

    channels: tuple[int, ...] = (16, 32, 32)
    lstm_size: int = 256

    def __init__(
        self, observation_shape: Sequence[int], num_actions: int, use_lstm: bool = False
    ) -> None:
        super().__init__(observation_shape, num_actions, use_lstm)
        _check_conv_shape("ResNetAgent", self.observation_shape)
        layers: list[nn.Module] = []
        in_channels = self.observation_shape[0]
        for out_channels in self.channels:
            layers += [
                nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1),
                nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
                _ResidualBlock(out_channels),
                _ResidualBlock(out_channels),
            ]
            in_channels = out_channels
        convs = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
        conv_size = _flat_size(convs, self.observation_shape, "ResNetAgent")
        self.torso = nn.Sequential(convs, nn.Linear(conv_size, 256), nn.ReLU())
        self.head = _CoreAndHeads(256, self.num_actions, self.lstm_size if use_lstm else None)
        self.to(memory_format=torch.channels_last)  # conv weights NHWC, see _agent_forward


class MinAtarNet(_Agent):
    """The network of the MinAtar paper (Young & Tian 2019, "MinAtar: An Atari-inspired
    testbed for thorough and reproducible reinforcement learning experiments"; its AC(lambda)
    and DQN agents) for MinAtar's ``(10, 10, C)`` observations, channels last as the games
    give them. Cells are 0 or 1 whatever their dtype: bool from the in-graph games, uint8
    from the ``minatar`` package's gym ids (``Box(0, 1, uint8)``); either becomes 0.0 / 1.0,
    never scaled by 1/255 as Atari pixels are.

    Torso: conv 16 3x3 stride 1 without padding + ReLU (10x10 -> 8x8), fully connected 128 +
    ReLU. Then, as every agent here, the core and heads: the features with the clipped reward
    and the one-hot last action, read out by the policy and baseline layers. With
    ``use_lstm`` the core is a one-layer LSTM whose hidden size equals its input size
    (``128 + num_actions + 1``). ``model: auto`` picks it for ``MinAtar/`` ids (docs/impala.md).

    Example:
        >>> import torch
        >>> net = MinAtarNet((10, 10, 4), num_actions=3)
        >>> inputs = {"frame": torch.zeros(2, 5, 10, 10, 4, dtype=torch.bool),
        ...           "reward": torch.zeros(2, 5), "done": torch.zeros(2, 5, dtype=torch.bool),
        ...           "last_action": torch.zeros(2, 5, dtype=torch.long)}
        >>> outputs, _ = net(inputs)
        >>> tuple(outputs["policy_logits"].shape), sum(p.numel() for p in net.parameters())
        ((2, 5, 3), 132324)
    """

    conv_channels: int = 16
    hidden_size: int = 128
    frames_last = True
    pixels = False

    def __init__(
        self, observation_shape: Sequence[int], num_actions: int, use_lstm: bool = False
    ) -> None:
        super().__init__(observation_shape, num_actions, use_lstm)
        if len(self.observation_shape) != 3:
            raise ValueError(
                "MinAtarNet: observation_shape must be MinAtar's channels-last (H, W, C), "
                f"got {self.observation_shape}"
            )
        height, width, channels = self.observation_shape
        convs = nn.Sequential(
            nn.Conv2d(channels, self.conv_channels, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        conv_size = _flat_size(convs, (channels, height, width), "MinAtarNet")
        self.torso = nn.Sequential(convs, nn.Linear(conv_size, self.hidden_size), nn.ReLU())
        core_input_size = self.hidden_size + self.num_actions + 1
        self.head = _CoreAndHeads(
            self.hidden_size, self.num_actions, core_input_size if use_lstm else None
        )
        self.to(memory_format=torch.channels_last)  # conv weights NHWC, see _agent_forward
