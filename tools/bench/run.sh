#!/usr/bin/env bash
# Implements: the one bench command: installs, builds dptrain (Release, CPU;
# and the GEMM rate tool on OpenBLAS, the GEMM rows' baseline),
# prepares Fashion-MNIST (synthetic data of the same shape when it is not
# available) and the fortunes token set of the GPT rows, runs
# tools/bench/bench.py and says where the results are.
#   tools/bench/run.sh [bench.py options...]     e.g. --repeats 3
#   tools/bench/run.sh --gpt                     the GPT rows alone (no OpenBLAS
#                                                build, no Fashion-MNIST)
#   tools/bench/run.sh --shard                   the sharded-optimizer and sharded-parameter rows alone
#                                                (tools/bench/shard_rows.py: dptrain
#                                                only, its own synthetic set); a
#                                                full run ends with them unless
#                                                --skip-shard (or --gpt, --skip-e2e);
#                                                --shard-* options go to them alone
#   tools/bench/run.sh --recompute               the --recompute blocks rows alone
#                                                (tools/bench/recompute_rows.py: the
#                                                text GPT job both ways, and the plan
#                                                of GPT-2 small); a full run ends with
#                                                them unless --skip-recompute (or --gpt,
#                                                --skip-e2e); --recompute-* options go
#                                                to them alone
# Environment: BUILD_DIR (default build-bench), OUT (default bench-results),
# DATA (an HDF5 file to use instead), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."

tools/bench/install.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build=${BUILD_DIR:-build-bench}
out=${OUT:-bench-results}
gpt_only=0 skip_gpt=0 skip_mlp=0 shard_only=0 skip_shard=0 recompute_only=0 skip_recompute=0
bench_args=()  # to bench.py: every option but the shard rows' own
shard_args=()  # to shard_rows.py: --shard-* options (it ignores bench.py's)
recompute_args=()  # to recompute_rows.py: --recompute-* options
while (($#)); do
  case "$1" in
    --shard) shard_only=1 ;;
    --skip-shard) skip_shard=1 ;;
    --shard-*=*) shard_args+=("$1") ;;
    --shard-*) shard_args+=("$1" "${2?$1 needs a value}"); shift ;;
    --recompute) recompute_only=1 ;;
    --skip-recompute) skip_recompute=1 ;;
    --recompute-*=*) recompute_args+=("$1") ;;
    --recompute-*) recompute_args+=("$1" "${2?$1 needs a value}"); shift ;;
    *)
      case "$1" in
        --gpt) gpt_only=1 ;;
        --skip-gpt) skip_gpt=1 ;;
        --skip-mlp) skip_mlp=1 ;;
        --skip-e2e) skip_shard=1; skip_recompute=1 ;;
      esac
      bench_args+=("$1") ;;
  esac
  shift
done
if ((gpt_only)); then skip_shard=1; skip_recompute=1; fi

py=$(tools/find-python.sh)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_CUDA=OFF >/dev/null
if ((shard_only)); then
  # The sharded-optimizer rows alone: dptrain on synthetic data, no baselines.
  cmake --build "$build" -j "${JOBS:-2}" --target dptrain >/dev/null
  "$py" tools/bench/shard_rows.py --build-dir "$build" --out "$out" "${bench_args[@]}" "${shard_args[@]}"
  "$py" tools/bench/shard_rows.py --build-dir "$build" --out "$out" "${bench_args[@]}" "${shard_args[@]}" \
    --shard-flag=--shard-params
  echo "bench: results in $out/shard.md, $out/shard.json, $out/shard_params.md, $out/shard_params.json"
  exit 0
fi
# The fortunes token set of the GPT and recomputation rows, as tools/demo_text.sh
# makes it (package fortunes, from tools/install-deps.sh --demo).
fortunes() {
  [[ -f data/fortunes.h5 ]] && return
  mkdir -p data
  "$py" tools/convert_text.py /usr/share/games/fortunes --output data/fortunes.h5 --window 64 >/dev/null
}
if ((recompute_only)); then
  cmake --build "$build" -j "${JOBS:-2}" --target dptrain >/dev/null
  fortunes
  "$py" tools/bench/recompute_rows.py --build-dir "$build" --out "$out" "${bench_args[@]}" "${recompute_args[@]}"
  echo "bench: results in $out/recompute.md, $out/recompute.json"
  exit 0
fi
cmake --build "$build" -j "${JOBS:-2}" \
  --target dptrain dptrain_bench dptrain_cnn_bench dptrain_gpt_bench dptrain_gemm_rate >/dev/null
openblas_build=${build}-openblas
openblas_args=()
if ((!gpt_only && !skip_mlp)); then
  # The GEMM rows' baseline: the same rate tool built on OpenBLAS.
  cmake -S . -B "$openblas_build" -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_CUDA=OFF \
    -DDPTRAIN_CPU_GEMM=openblas -DDPTRAIN_TESTS=OFF >/dev/null
  cmake --build "$openblas_build" -j "${JOBS:-2}" --target dptrain_gemm_rate >/dev/null
  openblas_args=(--openblas-gemm-rate "$openblas_build/tools/bench/dptrain_gemm_rate")
fi

if ((!skip_gpt || !skip_recompute)); then fortunes; fi
data=${DATA:-}
data_args=()
if ((gpt_only)); then
  :  # the GPT rows read data/fortunes.h5 (bench.py --gpt-data)
elif [[ -z "$data" ]]; then
  data=data/fashion_mnist.h5
  mkdir -p data
  if [[ ! -f "$data" ]]; then
    # tools/install-deps.sh --demo (from install.sh) installs dataset-fashion-mnist.
    if "$py" tools/convert_fashion_mnist.py "$data.tmp" >/dev/null 2>&1; then
      mv "$data.tmp" "$data"
    else
      rm -f "$data.tmp"
      data=data/bench_synthetic.h5
      echo "bench: Fashion-MNIST not available; using synthetic $data (60000 x 28x28 uint8, 10 classes)"
      [[ -f "$data" ]] || "$py" tools/make_synthetic.py "$data" --n 60000 --val-n 10000 \
        --shape 28,28 --classes 10 --dtype uint8 --seed 1 >/dev/null
    fi
  fi
fi

if [[ -n "$data" ]]; then data_args=(--data "$data"); fi

"$py" tools/bench/bench.py "${data_args[@]}" --build-dir "$build" --out "$out" --python "$py" \
  "${openblas_args[@]}" "${bench_args[@]}"
if ((!skip_shard)); then
  # The sharded-optimizer rows (about 3 minutes at --repeats 5 on 2 cores).
  "$py" tools/bench/shard_rows.py --build-dir "$build" --out "$out" "${bench_args[@]}" "${shard_args[@]}"
  "$py" tools/bench/shard_rows.py --build-dir "$build" --out "$out" "${bench_args[@]}" "${shard_args[@]}" \
    --shard-flag=--shard-params
  echo "bench: results in $out/shard.md, $out/shard.json, $out/shard_params.md, $out/shard_params.json"
fi
if ((!skip_recompute)); then
  # The recomputation rows (about 2 minutes at --repeats 3 on 2 cores).
  "$py" tools/bench/recompute_rows.py --build-dir "$build" --out "$out" "${bench_args[@]}" "${recompute_args[@]}"
  echo "bench: results in $out/recompute.md, $out/recompute.json"
fi
echo "bench: results in $out/results.md, $out/results.json, $out/results.png"
