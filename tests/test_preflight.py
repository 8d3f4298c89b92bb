"""batchenv.preflight: one-line errors before a run creates anything."""

import sys

import pytest
import torch

from batchenv import preflight


def test_unknown_env_and_missing_extras(monkeypatch):
    with pytest.raises(ValueError) as error:
        preflight.check_gym_env("NoSuchEnv-v0")
    assert str(error.value).startswith(
        "unknown env 'NoSuchEnv-v0': expected a registered Gymnasium id such as 'CartPole-v1'"
    )
    monkeypatch.setitem(sys.modules, "ale_py", None)
    with pytest.raises(ValueError) as error:
        preflight.check_gym_env("PongNoFrameskip-v4")
    assert str(error.value) == (
        'PongNoFrameskip-v4 is an Atari env and needs ale-py: pip install -e ".[atari]"'
    )
    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(ValueError) as error:
        preflight.check_gym_env("Hopper-v5")
    assert str(error.value) == 'Hopper-v5 needs the mujoco package: pip install -e ".[mujoco]"'
    preflight.check_gym_env("CartPole-v1")


def test_devices(monkeypatch):
    preflight.check_device("cpu")
    preflight.check_device("auto")
    with pytest.raises(ValueError, match="^unknown device 'gpu': expected cpu, cuda, cuda:N"):
        preflight.check_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^device 'cuda:1' asked for, but this machine has"):
        preflight.check_device("cuda:1")


@pytest.mark.parametrize(
    "flags, slow",
    [
        ({"avx2", "avx512f"}, True),
        ({"avx2", "avx512_bf16"}, False),
        ({"avx2", "amx_bf16"}, False),
        (set(), False),  # unknown (no /proc/cpuinfo): say nothing
    ],
)
def test_bf16_is_slow_reads_the_cpu_flags(monkeypatch, flags, slow):
    monkeypatch.setattr(preflight, "cpu_flags", lambda: flags)
    reason = preflight.bf16_is_slow("cpu")
    if slow:
        assert reason == (
            "this CPU has neither AVX512-BF16 nor AMX, so bf16 runs ~4x slower than fp32"
        )
    else:
        assert reason is None


def test_cpu_flags_on_linux():
    flags = preflight.cpu_flags()
    if sys.platform.startswith("linux"):
        assert "fpu" in flags
