"""The roofline model and compile reports of ``benchmarks/gpu_roofline/`` (printed by
``benchmarks/gpu_model.py``): the byte counts follow the envs' real tensors, the occupancy
and time arithmetic, the SASS loop weighting, the simulate() op count, the host figures the
tables use; the command line as a script; and (compiling for sm_90 in a subprocess) one
real report."""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from types import MappingProxyType

import pytest
import torch

from batchenv.kernels import CartPole, ContinuousTag, DiscreteTag, Pendulum, tag_continuous
from benchmarks import gpu_envs, gpu_roofline
from benchmarks.gpu_roofline import H100, HOST, occupancy, tables

META = "meta"


# -- bytes ------------------------------------------------------------------------------------


def test_cartpole_bytes_follow_the_state_layout():
    n, fresh = 1000, 0.25
    env = CartPole(n, device=META, seed=0)
    # By hand from the layout: state [N, 4] fp32 read and written, elapsed int32 read and
    # written, restart counters int64 read (written for the fresh rows), int64 actions, the
    # bool reset mask, observ [N, 4] fp32, reward fp32, two bool flags.
    per_row = 2 * 16 + 2 * 4 + 8 + fresh * 8 + 8 + 1 + 16 + 4 + 1 + 1
    assert gpu_roofline.bytes_per_step(env, reset_fraction=fresh) == pytest.approx(n * per_row)
    launch = gpu_roofline.capture_env_launch(env)
    assert launch.grid == (math.ceil(n / 256),) and launch.num_warps == 8  # one row/thread
    assert {t.param for t in gpu_roofline.traffic(launch)} == {
        "state_ptr", "elapsed_ptr", "restarts_ptr", "action_ptr", "reset_mask_ptr",
        "observ_ptr", "reward_ptr", "terminated_ptr", "truncated_ptr",
    }  # fmt: skip


def test_fp64_state_doubles_only_the_state_bytes():
    n = 64
    fp32 = gpu_roofline.bytes_per_step(Pendulum(n, device=META, seed=0))
    fp64 = gpu_roofline.bytes_per_step(Pendulum(n, device=META, seed=0, dtype=torch.float64))
    assert fp64 - fp32 == n * 2 * 2 * 4  # [N, 2] state, read and written, 4 more bytes each


def test_reset_and_plain_step_launches_touch_only_their_tensors():
    n = 100
    env = CartPole(n, device=META, seed=0)
    reset_only = gpu_roofline.traffic(gpu_roofline.capture_env_launch(env, step=False))
    assert {t.param for t in reset_only} == {
        "state_ptr",
        "elapsed_ptr",
        "restarts_ptr",
        "reset_mask_ptr",
        "observ_ptr",
    }
    plain = gpu_roofline.traffic(gpu_roofline.capture_env_launch(env, reset=False))
    assert "reset_mask_ptr" not in {t.param for t in plain}
    assert "restarts_ptr" not in {t.param for t in plain}


def test_discrete_tag_bytes_follow_the_state_layout():
    e, a = 30, 7
    full = DiscreteTag(e, num_taggers=a - 1, device=META, seed=0)
    # pos [E, A, 2] int32 r+w, int64 actions, observ [E, A, 4A+1] fp32, reward [E, A],
    # per env: elapsed r+w, restart counter r+w, reset mask, two flags.
    per_env = a * (2 * 8 + 8 + (4 * a + 1) * 4 + 4) + 2 * 4 + 2 * 8 + 1 + 2
    assert gpu_roofline.bytes_per_step(full) == e * per_env
    partial = DiscreteTag(e, num_taggers=a - 1, full_observation=False, device=META, seed=0)
    assert gpu_roofline.bytes_per_step(full) - gpu_roofline.bytes_per_step(partial) == (
        e * a * (4 * a + 1 - 6) * 4
    )


def test_continuous_tag_bytes_count_the_action_grids_once():
    e, taggers, runners, k = 20, 2, 8, 3
    env = ContinuousTag(
        e, num_taggers=taggers, num_runners=runners, num_other_agents_observed=k, device=META
    )
    a = taggers + runners
    grids = 4 * (len(env.acceleration_actions) + len(env.turn_actions))
    per_env = a * (2 * 24 + 2 * 8 + (7 * k + 1) * 4 + 4) + 2 * 4 + 2 * 8 + 1 + 2
    assert gpu_roofline.bytes_per_step(env) == e * per_env + grids


def test_sampler_bytes_and_rows_per_program():
    launch = gpu_roofline.capture_sampler_launch(10_000, 5)
    assert gpu_roofline.launch_bytes(launch) == 10_000 * (5 * 4 + 8)
    assert launch.args["ROWS"] == 128 and launch.programs == math.ceil(10_000 / 128)
    small = gpu_roofline.capture_sampler_launch(3, 5)
    assert small.args["ROWS"] == 4 and small.programs == 1


def test_a_missing_pointer_role_is_an_error():
    launch = gpu_roofline.capture_sampler_launch(8, 5)
    roles = dict(gpu_roofline.ROLES["sampler"])
    del roles["x_ptr"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(gpu_roofline.ROLES, "sampler", roles)
        with pytest.raises(KeyError, match="no role for pointer 'x_ptr'"):
            gpu_roofline.traffic(launch)


# -- occupancy and time ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "regs, threads, smem, blocks, limiter",
    [
        (48, 128, 0, 10, "registers"),  # 1536 regs/warp: 10 warps per sub-partition
        (32, 256, 0, 8, "warps & registers"),  # 1024 regs/warp: 16 per sub-partition
        (40, 32, 0, 32, "blocks"),  # one-warp programs: 32 blocks = 50%
        (184, 32, 128, 8, "registers"),  # 5888 -> 6144 regs/warp: 2 per sub-partition
        (32, 128, 100 * 1024, 2, "shared memory"),  # 101 KB per block with the reserve
        (255, 1024, 0, 0, "registers"),  # does not fit at all
    ],
)
def test_occupancy_arithmetic(regs, threads, smem, blocks, limiter):
    result = occupancy(regs, threads, smem)
    assert result.blocks_per_sm == blocks and result.limiter == limiter
    assert result.fraction == blocks * math.ceil(threads / 32) / 64


def test_kernel_time_takes_the_largest_term():
    small = gpu_roofline.kernel_time("k", 1e3)
    assert small.bound == "floor" and small.seconds == H100.kernel_floor_s
    assert gpu_roofline.kernel_time("k", 1e3, in_graph=True).seconds == H100.graph_node_s
    big = gpu_roofline.kernel_time("k", 1e9)
    assert big.bound == "memory"
    assert big.seconds == pytest.approx(1e9 / (H100.hbm_bytes_per_s * H100.hbm_efficiency))


def test_cartpole_prediction_is_host_bound_small_and_memory_bound_large():
    small = gpu_roofline.predict_env_rate(CartPole(1024, device=META), compile=False)
    assert small.bound == "host"
    host = HOST.step_s["classic"] + HOST.cuda_launch_s + HOST.torch_op_s
    assert small.steps_per_s == pytest.approx(1024 / host)
    n = 1 << 24
    large = gpu_roofline.predict_env_rate(CartPole(n, device=META), compile=False)
    assert large.bound == "memory"
    nbytes = gpu_roofline.bytes_per_step(CartPole(n, device=META), 0.05) + 3 * n  # + done flags
    roof = H100.hbm_bytes_per_s * H100.hbm_efficiency / nbytes * n
    assert large.steps_per_s == pytest.approx(roof, rel=1e-6)
    graph = gpu_roofline.predict_env_rate(CartPole(1024, device=META), mode="graph", compile=False)
    assert graph.steps_per_s == pytest.approx(1024 / HOST.graph_replay_s)
    direct = gpu_roofline.predict_env_rate(
        CartPole(1024, device=META), mode="direct", compile=False
    )
    launcher = HOST.launcher_s["classic"] + HOST.compiled_launch_s + HOST.cuda_launch_s
    assert direct.host_s == pytest.approx(launcher + HOST.torch_op_s)
    with pytest.raises(ValueError, match="mode='fused'"):
        gpu_roofline.predict_env_rate(CartPole(4, device=META), mode="fused")


def test_launch_bound_until_finds_the_crossover():
    def make(n):
        return CartPole(n, device=META)

    n = gpu_roofline.launch_bound_until(make, mode="graph")
    assert gpu_roofline.predict_env_rate(make(n), mode="graph", compile=False).bound != "host"
    assert gpu_roofline.predict_env_rate(make(n - 1), mode="graph", compile=False).bound == "host"


def test_predicted_column_of_gpu_envs():
    row = gpu_envs.Row("env", "discrete", "triton", 2000, 5, None, "needs a GPU")
    expected = gpu_roofline.predict_env_rate(
        DiscreteTag(2000, num_taggers=4, device=META, seed=0), gpu=gpu_roofline.H200
    ).steps_per_s
    assert gpu_envs.predict(row, "NVIDIA H200") == pytest.approx(expected)
    assert gpu_envs.predict(gpu_envs.Row("env", "discrete", "torch", 2000, 5, 1.0), "") is None
    sampler = gpu_envs.Row("sampler", "categorical", "triton", 2000, 5, None)
    assert gpu_envs.predict(sampler, "") == pytest.approx(
        gpu_roofline.predict_sampler_rate(10_000, 5).steps_per_s
    )


def test_tables_predict_with_the_host_they_are_given():
    # --measure-host hands the re-measured Host to every table; none may fall back to HOST.
    slow = replace(HOST, step_s=MappingProxyType({k: 10 * v for k, v in HOST.step_s.items()}))
    env = CartPole(1024, device=META, seed=0)
    rates = [
        f"{gpu_roofline.predict_env_rate(env, host=host).steps_per_s / 1e6:.2f}M (host)"
        for host in (HOST, slow)
    ]
    assert rates[0] != rates[1]
    for host, rate in zip((HOST, slow), rates):
        row = tables.cartpole_table([1024], None, 0, host).splitlines()[-1]
        assert row.split(" | ")[3] == rate  # the "eager step" column


def test_the_command_line_runs_as_a_script():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run(
        [sys.executable, os.path.join("benchmarks", "gpu_model.py"), "--help"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "--measure-host" in result.stdout and "--no-compile" in result.stdout


# -- SASS -------------------------------------------------------------------------------------

SASS = """
        /*0000*/                   S2R R0, SR_TID.X ;
	//## File "/k.py", line 10
        /*0010*/                   LDG.E R2, desc[UR4][R2.64] ;
.L_x_0:
	//## File "/k.py", line 12
        /*0020*/                   FADD R4, R4, R2 ;
.L_x_1:
        /*0030*/                   FMUL R4, R4, R4 ;
        /*0040*/                   SHFL.BFLY PT, R5, R4, 0x1, 0x1f ;
	//## File "/k.py", line 13
        /*0050*/               @P0 BRA `(.L_x_1) ;
	//## File "/k.py", line 12
        /*0060*/              @!P1 BRA `(.L_x_0) ;
        /*0070*/                   STG.E desc[UR4][R2.64], R4 ;
        /*0080*/                   EXIT ;
.L_x_2:
        /*0090*/                   BRA `(.L_x_2);
        /*00a0*/                   NOP;
"""


def test_parse_sass_weights_nested_loops_by_their_trip_counts():
    trips = {12: 3, 13: 5}
    summary = gpu_roofline.parse_sass(SASS, lambda file, line: trips.get(line))
    assert summary.static == 10  # NOP left out
    assert summary.mix["global memory"] == 2 and summary.mix["warp shuffles"] == 1
    assert summary.mix["control flow"] == 4
    # S2R, LDG once; FADD and the outer branch 3x; FMUL, SHFL, inner branch 3 x 5;
    # STG, EXIT once; the sentinel after EXIT not at all.
    assert summary.dynamic == 2 + 2 * 3 + 3 * 15 + 2
    assert summary.loops == ((13, 5, 3), (12, 3, 5))
    unknown = gpu_roofline.parse_sass(SASS, lambda file, line: None)
    assert unknown.dynamic == 9 and unknown.unattributed_back_edges == 2


def test_loop_trip_counts_match_source_loops_to_the_ir():
    fn = tag_continuous._step_kernel.fn
    lines, first = inspect.getsourcelines(fn)
    where = {}
    for index, text in enumerate(lines):
        for var in ("tagger", "first", "slot"):
            if text.strip().startswith(f"for {var} in"):
                where.setdefault(var, []).append(first + index)
    ttir = textwrap.dedent(
        """
        %c0_i32 = arith.constant 0 : i32
        %c1_i32 = arith.constant 1 : i32
        %c5_i32 = arith.constant 5 : i32
        %c16_i32 = arith.constant 16 : i32
        %c105_i32 = arith.constant 105 : i32
        %c10_i32 = arith.constant 10 : i32
        %c7_i32 = arith.constant 7 : i32
        scf.for %tagger = %c0_i32 to %c5_i32 step %c1_i32 iter_args(...)
        scf.for %tagger_3 = %c0_i32 to %c7_i32 step %c1_i32 iter_args(...)
        scf.for %first = %c0_i32 to %c105_i32 step %c16_i32  : i32 {
        scf.for %slot = %c0_i32 to %c10_i32 step %c1_i32 iter_args(...)
        """
    )
    trips = gpu_roofline.loop_trip_counts(fn, ttir)
    path = inspect.getsourcefile(fn)
    assert [trips(path, line) for line in where["tagger"]] == [5, 7]  # n-th loop, n-th scf.for
    assert trips(path, where["first"][0]) == 7  # ceil(105 / 16)
    assert trips(path, where["slot"][0]) == 10
    assert trips(path, where["slot"][0] + 1) is None  # not a for statement
    assert trips("/elsewhere/libdevice.py", where["slot"][0]) is None


# -- simulate() -------------------------------------------------------------------------------


def test_count_simulate_ops_sees_the_two_kernel_launches_and_the_host_reads():
    ops = gpu_roofline.count_simulate_ops(CartPole(64, seed=0))
    assert ops.triton_launches == 2  # the reset of finished rows, then the step
    assert ops.ops["nonzero"] == 1 and ops.syncs >= 2  # the rows to reset; the finite checks
    assert ops.torch_launches > 20
    assert ops.triton_bytes > 0 and ops.torch_bytes > 0
    slow = gpu_roofline.predict_simulate_rate(ops, 64, 64)
    assert slow.bound == "host" and slow.sync_s == ops.syncs * HOST.sync_s


# -- a real compile report (subprocess: these kernels were defined for the interpreter) ---------

REPORT_SCRIPT = """
import sys
sys.path.insert(0, ".")
try:
    from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401
except Exception as error:
    print("SKIP no NVIDIA backend:", error)
    sys.exit(0)
from batchenv.kernels import CartPole
from benchmarks import gpu_roofline
for launch in (gpu_roofline.capture_env_launch(CartPole(1 << 20, device="meta", seed=0)),
               gpu_roofline.capture_sampler_launch(2_000_000, 5)):
    r = gpu_roofline.compile_report(launch)
    print(r.kernel, r.num_warps, r.regs, r.spill_stores, r.spill_loads, r.smem,
          r.occupancy.fraction, r.sass.static, r.sass.dynamic, r.sass.mix.get("global memory"))
"""


def test_compile_report_of_real_kernels():
    pytest.importorskip("triton")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", REPORT_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    if result.stdout.startswith("SKIP"):
        pytest.skip(result.stdout.strip())
    reports = [line.split() for line in result.stdout.strip().splitlines()]
    # The classic envs share one kernel (their dynamics are its constexpr device functions).
    assert [r[0] for r in reports] == ["_classic.step_kernel", "sampler._sample_kernel"]
    for _, _, regs, spill_st, spill_ld, _, fraction, static, dynamic, loads in reports:
        assert 0 < int(regs) <= 64 and spill_st == spill_ld == "0"
        assert float(fraction) >= 0.5  # the report's threshold for a finding
        assert int(static) >= int(dynamic) > 0 and int(loads) > 0
    assert reports[0][1] == "8" and reports[0][5] == "0"  # one row per thread, no smem
