#!/usr/bin/env bash
# The GPU benchmarks in one call on a lent GPU machine whose image has torch, Triton and JAX
# with CUDA but no registry: each stage under its own deadline, logs under $OUT.
#
# Prepare on a machine with pip, in the repo root (ignored folders, carried with the call):
#   .whl/  wheels for Python 3.12 of gymnax 1.0.1, distrax 0.1.9, tfp-nightly, gymnasium 1.4.0,
#          farama-notifications, MinAtar, dm-tree, gast, decorator
#   .pjx/purejaxrl/  the PureJaxRL checkout that `jax_parity.py --setup` adapted
#
#   bash benchmarks/gpu_run.sh minatar gpu_envs in_graph impala     # the stages to run, in order
#   bash benchmarks/gpu_run.sh ppo seeds                             # PureJaxRL on the same card
#   bash benchmarks/gpu_run.sh tests                                 # Triton's CUDA checks
set -u
OUT=${OUT:-/tmp/gpu_run}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
REPO=$PWD

# batchenv from this copy of the tree, without an install: the package laid out as setup.cfg
# maps it (links in the copy, which the machine throws away), so that worker processes that
# put the repo first on sys.path import the same package.
if [ ! -e batchenv/algorithms ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    ln -s ../algorithms batchenv/algorithms
    ln -s ../kernels batchenv/kernels
    # The C++ batcher (async IMPALA), built beside the first stages.
    (python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1; echo "rc=$?" >>"$OUT/build.log") &
fi
export PYTHONPATH=/tmp/site:$REPO

stage() {  # stage NAME SECONDS COMMAND...: its log in $OUT/NAME.log, the end of it here
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit} s) $(date +%T)"
    timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n "${TAIL:-30}" "$OUT/$name.log"
    echo "=== $name rc=$rc $(date +%T)"
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
JAX=(--jax-python python3)
for what in "$@"; do
    case $what in
    minatar)
        TAIL=40 stage minatar 200 python3 benchmarks/minatar_throughput.py --device cuda --triton \
            --games "${GAMES:-breakout,asterix,freeway,seaquest,space_invaders}" --sizes 256,4096,65536 \
            --rounds 1 --seconds 0.3 --minatar-max-n 0 --timeout 90 "${JAX[@]}" ;;
    gpu_envs)
        TAIL=42 stage gpu_envs 100 python3 benchmarks/gpu_envs.py --seconds 0.25 --no-compile ;;
    in_graph)
        TAIL=8 stage in_graph 70 python3 benchmarks/in_graph_throughput.py --device cuda \
            --sizes 65536,1048576,4194304 --rounds 1 --seconds 0.3 ;;
    impala)
        wait  # the batcher's build
        tail -n 2 "$OUT/build.log"
        TAIL=12 stage impala 70 python3 benchmarks/impala_throughput.py --env cartpole \
            --modes "${MODES:-sync,async}" --device cuda --seconds 20 --warmup 5 ;;
    tests)  # on the GPU: Tag past 64 agents (4 warps) and MinAtar's kernels against torch;
        # a module trained by torch.optim as a CUDA graph
        W=test_triton_matches_torch_with_four_warps_a_program
        TAIL=15 stage tests 240 python3 -m pytest -q -m "" -p no:cacheprovider \
            "tests/kernels/test_tag_discrete.py::$W" "tests/kernels/test_tag_continuous.py::$W" \
            tests/kernels/minatar/test_triton.py \
            "tests/in_graph/test_cuda_graph.py::test_a_module_trained_by_torch_optim_replays_as_eager_steps" ;;
    ppo | seeds)
        TAIL=14 stage "$what" 200 python3 benchmarks/jax_parity.py --only "$what" --device cuda \
            --rounds 1 --purejaxrl-dir "$REPO/.pjx/purejaxrl" "${JAX[@]}" ;;
    *) echo "unknown stage $what" ;;
    esac
done
