"""The update programs compiled in a helper process (UpdatePrecompile): this process loads
them from Inductor's cache, and a helper that fails, hangs or is no longer needed costs
nothing but the time it had."""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import Future

import pytest
import torch
from torch._dynamo.utils import counters

from batchenv.algorithms.ppo import precompile, train
from batchenv.algorithms.ppo.config import PPOConfig
from batchenv.algorithms.ppo.precompile import UpdatePrecompile


def _fx_cache(name: str) -> int:
    return counters["inductor"][f"fxgraph_cache_{name}"]


def test_the_first_update_loads_the_helpers_programs_and_learns_the_same(tmp_path, monkeypatch):
    # An empty Inductor cache: without the helper all three programs would be misses.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "helped"))
    config = PPOConfig(num_steps=8, total_timesteps=8 * 4 * 3, hidden=7)
    hits, misses = _fx_cache("hit"), _fx_cache("miss")
    helped = train(config)
    assert _fx_cache("miss") - misses == 1  # the rollout, compiled here
    assert _fx_cache("hit") - hits == 2  # the preparation and the minibatch step

    # This process compiling the update itself, into another empty cache, computes the same
    # numbers (the helper's code is this process's code: same SIMD, same threads).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "alone"))
    misses = _fx_cache("miss")
    alone = train(dataclasses.replace(config, precompile=False))
    assert _fx_cache("miss") - misses == 3
    torch.testing.assert_close(helped.returns, alone.returns, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(helped.ppo.params, alone.ppo.params, rtol=0, atol=0)

    # A warm run: nothing compiles, whether the helper is killed or finished first.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "helped"))
    misses = _fx_cache("miss")
    warm = train(config)
    assert _fx_cache("miss") == misses
    torch.testing.assert_close(warm.returns, alone.returns, rtol=0, atol=0, equal_nan=True)


def _run_helper(cache: str) -> subprocess.CompletedProcess:
    """The real helper on a job and this process's SIMD choice, in Inductor cache ``cache``."""
    job = pickle.dumps((PPOConfig(num_steps=8, hidden=5), 1))
    choice = pickle.dumps(precompile.probe_vector_isa().result())
    env = dict(_env(), TORCHINDUCTOR_CACHE_DIR=cache)
    return subprocess.run(
        precompile._command(), input=job + choice, capture_output=True, timeout=300, env=env
    )


def test_the_helper_announces_a_compile_on_its_stdout_and_nothing_in_a_warm_cache(tmp_path):
    cold = _run_helper(str(tmp_path))
    assert cold.returncode == 0, cold.stderr.decode()[-2000:]
    assert cold.stdout == precompile.COMPILING  # once, for the first of its two programs
    warm = _run_helper(str(tmp_path))
    assert warm.returncode == 0, warm.stderr.decode()[-2000:]
    assert warm.stdout == b""


def test_the_announcement_comes_at_the_first_cache_miss(monkeypatch):
    inductor = counters["inductor"]
    monkeypatch.setitem(inductor, "fxgraph_cache_miss", 0)
    out = io.BytesIO()
    announcing = threading.Thread(target=precompile._announce_compiles, args=(out, 0.001))
    announcing.start()
    inductor["fxgraph_cache_hit"] += 1
    time.sleep(0.05)
    assert out.getvalue() == b""
    inductor["fxgraph_cache_miss"] += 1
    announcing.join(timeout=10)
    assert not announcing.is_alive()
    assert out.getvalue() == precompile.COMPILING


def _env() -> dict[str, str]:
    """This process's environment with its import path, as UpdatePrecompile gives it."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p or os.curdir for p in sys.path))


def _helper(monkeypatch, code: str, deadline: float = 60.0) -> UpdatePrecompile:
    monkeypatch.setattr(precompile, "_command", lambda: [sys.executable, "-c", code])
    return UpdatePrecompile(PPOConfig(), threads=1, deadline=deadline)


def test_a_failing_helper_is_reported_and_not_waited_for_again(monkeypatch):
    helper = _helper(monkeypatch, "import sys; sys.stderr.write('boom\\n'); sys.exit(3)")
    helper._process.wait(timeout=60)  # it failed while this process compiled its rollout
    assert helper.wait() is False
    assert helper.reason == "the helper exited with 3: boom"
    assert helper.wait() is False  # once is enough


def _announced(helper: UpdatePrecompile) -> None:
    """Block until the helper's announcement can be read (without reading it)."""
    assert select.select([helper._process.stdout], [], [], 60)[0]


_COMPILES = "import sys, time; sys.stdout.buffer.write(b'c'); sys.stdout.flush(); "


def test_a_hanging_helper_is_killed_at_its_deadline(monkeypatch):
    helper = _helper(monkeypatch, _COMPILES + "time.sleep(60)", deadline=0.5)
    _announced(helper)
    started = time.monotonic()
    assert helper.wait() is False
    assert time.monotonic() - started < 5
    assert helper.reason == "the helper had not finished after 0.5 s"
    assert helper._process.poll() is not None  # gone, not orphaned


def test_a_helper_that_announced_a_compile_is_waited_for(monkeypatch):
    helper = _helper(monkeypatch, _COMPILES + "time.sleep(1)")
    _announced(helper)
    assert helper.wait() is True, helper.reason
    assert helper.seconds >= 1


def test_a_silent_helper_is_killed_at_once_when_nothing_compiled_here(monkeypatch):
    # A warm run: the helper is still importing or tracing, or loading programs from the
    # cache; this process loads them as fast.
    helper = _helper(monkeypatch, "import time; time.sleep(60)")
    started = time.monotonic()
    assert helper.wait() is False
    assert time.monotonic() - started < 5
    assert helper.reason == "the helper had not started compiling, and nothing compiled here"
    assert helper._process.poll() is not None


def test_a_silent_helper_is_waited_for_when_this_process_compiled(monkeypatch):
    # A cold rollout here means a cold update: the helper will compile it.
    helper = _helper(monkeypatch, "import time; time.sleep(1)")
    inductor = counters["inductor"]
    monkeypatch.setitem(inductor, "fxgraph_cache_miss", inductor["fxgraph_cache_miss"] + 1)
    assert helper.wait() is True, helper.reason
    assert helper.seconds >= 1


def test_close_kills_a_helper_still_running(monkeypatch):
    helper = _helper(monkeypatch, "import time; time.sleep(60)")
    helper.close()
    assert helper._process.poll() is not None
    assert helper.reason == "closed before the first update"


def test_a_helper_that_is_dropped_is_killed(monkeypatch):
    helper = _helper(monkeypatch, "import time; time.sleep(60)")
    process = helper._process
    del helper
    assert process.poll() is not None


def test_a_helper_reads_its_job_and_compiles_nothing_for_a_finished_job():
    # The real command line, with a job whose update is eager: the helper imports, reads
    # the pickled job, agrees on the SIMD choice and exits cleanly.
    helper = UpdatePrecompile(PPOConfig(num_steps=8, compile=False), threads=1)
    helper._process.wait(timeout=300)  # before this process's first update
    assert helper.wait() is True, helper.reason


@pytest.mark.parametrize(
    "changes",
    [{"compile": False}, {"precompile": False}, {"device": "cuda"}, {"device": "cuda:1"}],
)
def test_no_helper_where_nothing_compiles_on_a_cpu(changes):
    assert UpdatePrecompile.wanted(PPOConfig(**changes)) is False
    assert UpdatePrecompile.wanted(PPOConfig()) is True


def test_a_helper_with_another_simd_choice_compiles_nothing():
    with pytest.raises(SystemExit, match="SIMD choice .* is not its parent's 'none'"):
        precompile._compile(PPOConfig(num_steps=8), 1, lambda: "none")


def test_a_helper_whose_parent_sent_no_simd_choice_compiles_nothing():
    # The job, then stdin closed: what the parent does when its own probes failed.
    job = pickle.dumps((PPOConfig(num_steps=8), 1))
    out = subprocess.run(
        precompile._command(), input=job, capture_output=True, timeout=300, env=_env()
    )
    assert out.returncode == 1
    last = out.stderr.decode().strip().splitlines()[-1]
    assert last == "the parent sent no SIMD choice (its probes failed)"


class _Pipe(io.BytesIO):
    def close(self):
        self.closed_with = self.getvalue()
        super().close()


def test_the_choice_is_sent_when_made_and_stdin_closed_either_way():
    made, failed = Future(), Future()
    made.set_result("avx512")
    failed.set_exception(RuntimeError("no compiler"))
    sent, nothing = _Pipe(), _Pipe()
    precompile._send_choice(sent, made)
    precompile._send_choice(nothing, failed)
    assert pickle.loads(sent.closed_with) == "avx512"
    assert nothing.closed_with == b""
    precompile._send_choice(sent, made)  # a pipe already closed (the helper gone): no error
