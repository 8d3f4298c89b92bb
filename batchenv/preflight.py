"""Checks made before a training run creates anything: the device, the env and its extras.

Each check raises ``ValueError`` with one line that says what was expected and what to do,
so that ``batchenv train`` can print it and exit with status 2 before a run directory, a
worker process or a model exists.

    >>> check_device("cpu")
    >>> check_gym_env("NoSuchEnv-v0")
    Traceback (most recent call last):
    ...
    ValueError: unknown env 'NoSuchEnv-v0': ...
"""

from __future__ import annotations

import importlib

__all__ = ["bf16_is_slow", "check_device", "check_gym_env", "cpu_flags"]

#: Gymnasium entry-point packages and the module and pip extra each needs.
_EXTRAS = {
    "gymnasium.envs.mujoco": ("mujoco", 'pip install -e ".[mujoco]"'),
    "gymnasium.envs.box2d": ("Box2D", 'pip install "gymnasium[box2d]"'),
}


def check_device(name: str) -> None:
    """``name`` is a torch device this torch can use (``cpu``, ``cuda``, ``cuda:N``,
    ``auto``)."""
    import torch

    if name == "auto":
        return
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {name!r}: expected cpu, cuda, cuda:N or auto") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only torch" if torch.version.cuda is None else "no visible GPU"
            raise ValueError(
                f"device {name!r} asked for, but this machine has {build}; use --device cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {name!r} asked for, but there are {torch.cuda.device_count()} GPUs; "
                f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
    elif device.type not in ("cpu", "mps", "xpu"):
        raise ValueError(f"unsupported device {name!r}: expected cpu, cuda, cuda:N or auto")


def check_gym_env(env_id: str) -> None:
    """``env_id`` is a registered Gymnasium id whose dependencies are installed.

    Atari ids (``PongNoFrameskip-v4``, ``ALE/Pong-v5``) need ale-py (the ``atari`` extra),
    MuJoCo ids the ``mujoco`` extra.
    """
    import gymnasium as gym

    if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        try:
            import ale_py
        except ImportError:
            raise ValueError(
                f'{env_id} is an Atari env and needs ale-py: pip install -e ".[atari]"'
            ) from None
        gym.register_envs(ale_py)
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as error:
        raise ValueError(
            f"unknown env {env_id!r}: expected a registered Gymnasium id such as "
            f"'CartPole-v1' (Gymnasium says: {error})"
        ) from None
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    for package, (module, command) in _EXTRAS.items():
        if entry.startswith(package):
            try:
                importlib.import_module(module)
            except ImportError:
                raise ValueError(f"{env_id} needs the {module} package: {command}") from None


def cpu_flags() -> set[str]:
    """The CPU feature flags of /proc/cpuinfo (empty where there is no such file)."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def bf16_is_slow(device: str) -> str | None:
    """Why bfloat16 autocast would be slower than float32 on ``device``, or None.

    On a CPU without AVX512-BF16 or AMX, bf16 matrix products are emulated (about 4x
    slower than float32 here); on a GPU without bf16 support they are not available.
    """
    import torch

    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            return "this GPU does not support bfloat16"
        return None
    flags = cpu_flags()
    if not flags:
        return None  # not Linux: unknown, say nothing
    if {"avx512_bf16", "amx_bf16"} & flags:
        return None
    return "this CPU has neither AVX512-BF16 nor AMX, so bf16 runs ~4x slower than fp32"
