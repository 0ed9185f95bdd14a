#!/usr/bin/env bash
# Implements: the GPU check for a bare machine with an NVIDIA GPU, the CUDA
# Toolkit and PyTorch but no Open MPI/HDF5/Boost/BLAS: runs the prebuilt GPU
# tests (1 rank, and 2 when there are 2 GPUs), trains on a synthetic set with
# --device cuda, times a step against its bare cuBLAS GEMMs (dptrain_bench,
# when built), and compares step times with PyTorch eager. Under 5 minutes.
#   Here (Debian, network): cmake -S . -B build-gpu -DDPTRAIN_CUDA=ON && cmake --build build-gpu -j
#                           tools/gpu-deps.sh
#   There:                  tools/gpu-check.sh
# Environment: BUILD_DIR (default build-gpu), DEPS_DIR (default .gpu-deps),
# DATA (an HDF5 file with train/test sets; default DEPS_DIR/synthetic.h5),
# STEPS (training steps per run, default 400).
set -uo pipefail
cd "$(dirname "$0")/.."

build=${BUILD_DIR:-build-gpu}
deps=$(realpath "${DEPS_DIR:-.gpu-deps}")
steps=${STEPS:-400}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0
note() { echo "gpu-check: $*"; }
py=$(command -v python3 || true)

# --- the unpacked runtime tree (tools/gpu-deps.sh) ----------------------------
root=$deps/root
[[ -x $root/usr/bin/orterun ]] || { note "no $root/usr/bin/orterun: run tools/gpu-deps.sh and carry $deps"; exit 1; }
lib=$root/usr/lib/x86_64-linux-gnu
export OPAL_PREFIX=$root/usr PMIX_INSTALL_PREFIX=$lib/pmix2
export PATH=$root/usr/bin:$PATH
# One node: shared memory only, no UCX/libfabric (left out of the tree).
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dpt_libs=$lib:$root/lib/x86_64-linux-gnu
# CUDA 13 runtime, cuBLAS and NCCL: the toolkit's, else the pip wheels that
# came with PyTorch (nvidia/*/lib).
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && dpt_libs=$dpt_libs:$d
done
if [[ -n $py ]]; then
  wheel_libs=$("$py" - 2>/dev/null <<'PY'
import glob, os, site
dirs = []
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
print(":".join(dirs))
PY
  )
  [[ -n $wheel_libs ]] && dpt_libs=$dpt_libs:$wheel_libs
fi
export LD_LIBRARY_PATH=$dpt_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

missing=$(ldd "$build/dptrain" 2>&1 | grep -E "not found" || true)
if [[ -n $missing ]] && grep -q "GLIBCXX\|CXXABI\|GCC_" <<<"$missing"; then
  note "system libstdc++ too old for this build: using $deps/fallback"
  export LD_LIBRARY_PATH=$deps/fallback/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
  missing=$(ldd "$build/dptrain" 2>&1 | grep -E "not found" || true)
fi
if [[ -n $missing ]]; then
  note "libraries still missing for $build/dptrain:"
  echo "$missing"
  exit 1
fi

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
note "$ngpu GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
mpirun=(orterun --oversubscribe --bind-to none)

# --- 1. GPU tests ----------------------------------------------------------------
run_tests() {  # run_tests NP LIMIT
  local rc
  timeout -k 5 "$2" "${mpirun[@]}" -n "$1" "$build/tests/gpu_tests" --gtest_brief=1 >"$work/tests$1.txt" 2>&1
  rc=$?
  tail -25 "$work/tests$1.txt"
  case $rc in
    0) note "gpu_tests on $1 rank(s): passed" ;;
    77) note "gpu_tests on $1 rank(s): skipped (no GPU visible)"; status=1 ;;
    124 | 137) note "gpu_tests on $1 rank(s): TIMED OUT after $2 s"; status=1 ;;
    *) note "gpu_tests on $1 rank(s): FAILED (exit $rc)"; status=1 ;;
  esac
}
run_tests 1 150
if ((ngpu >= 2)); then run_tests 2 90; else note "one GPU: the 2-rank GPU tests need 2 GPUs, skipped"; fi

# --- 2. training on the GPU -------------------------------------------------------
data=${DATA:-$deps/synthetic.h5}
if [[ ! -f $data ]]; then
  if [[ -n $py ]] && "$py" -c "import h5py, numpy" 2>/dev/null; then
    "$py" tools/make_synthetic.py "$work/synthetic.h5" --n 8192 --val-n 1024 --shape 28,28 \
      --classes 10 --dtype uint8 --seed 1 >/dev/null && data=$work/synthetic.h5
  fi
fi
[[ -f $data ]] || { note "no data set (no $data and no h5py to make one): training skipped"; exit 1; }

train() {  # train PRECISION -> $work/PRECISION.jsonl
  timeout -k 5 120 "${mpirun[@]}" -n 1 "$build/dptrain" train --data "$data" --val-set "" \
    --model dense:256,relu,dense:256,relu,dense:10 --loss xent --batch-size 128 \
    --optimizer adam --lr 1e-3 --steps "$steps" --seed 1 --shuffle none --device cuda \
    --precision "$1" --log-every 50 --metrics "$work/$1.jsonl" >"$work/$1.out" 2>&1
  local rc=$?
  if ((rc != 0)); then
    note "dptrain train --precision $1 FAILED (exit $rc):"
    tail -15 "$work/$1.out"
    status=1
  fi
}
for p in fp32 tf32 bf16; do train "$p"; done
tail -3 "$work/fp32.out"

# --- 3. a step against its own GEMMs, through the same backend (dptrain_bench) ---
bench=$build/tools/bench/dptrain_bench
if [[ -x $bench ]]; then
  for p in fp32 tf32 bf16; do
    timeout -k 5 60 "${mpirun[@]}" -n 1 "$bench" gemm --device cuda --precision "$p" \
      --repeats 200 >"$work/bench-$p.txt" 2>&1 || { note "dptrain_bench gemm --precision $p FAILED:"; status=1; }
    grep -h '^{' "$work/bench-$p.txt" || tail -5 "$work/bench-$p.txt"
  done
else
  note "no $bench (build its target too): step-vs-GEMM rows skipped"
fi

# --- 4. PyTorch eager on the same MLP, and the step's GEMMs alone ----------------
if [[ -z $py ]] || ! "$py" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  note "no PyTorch with CUDA: comparison skipped"
  exit $status
fi
"$py" - "$work" "$steps" <<'PY'
import json, os, statistics, sys, time
import torch

work, steps = sys.argv[1], int(sys.argv[2])
dev = torch.device("cuda")
B, sizes = 128, [784, 256, 256, 10]

def dptrain_stats(precision):
    path = os.path.join(work, precision + ".jsonl")
    if not os.path.exists(path):
        return None
    ev = [json.loads(l) for l in open(path) if l.strip()]
    train = [e for e in ev if e.get("event") == "train"][1:]  # the first interval holds start-up
    if not train:
        return None
    sps = statistics.median(e["samples_per_s"] for e in train)
    ms = train[-1].get("ms", {})
    data_share = statistics.median(
        e["ms"].get("data", 0.0) / max(1e-9, sum(e["ms"].values())) for e in train if e.get("ms"))
    return 1000.0 * B / sps, ms.get("forward", 0.0) + ms.get("backward", 0.0), data_share

def timed(fn, iters):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return 1000.0 * (time.perf_counter() - t) / iters

def torch_step_ms(precision):
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    layers = []
    for i in range(3):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(B, 784, device=dev)
    y = torch.randint(0, 10, (B,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return timed(step, 300)

def gemm_ms(precision):
    # The 8 GEMMs of one dptrain step: 3 forward, 3 weight gradients, and the
    # 2 input gradients (none for the first layer).
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    dt = torch.bfloat16 if precision == "bf16" else torch.float32
    ops = []
    for i in range(3):
        fin, fout = sizes[i], sizes[i + 1]
        x = torch.rand(B, fin, device=dev, dtype=dt)
        w = torch.rand(fout, fin, device=dev, dtype=dt)
        dy = torch.rand(B, fout, device=dev, dtype=dt)
        ops.append((x, w.t()))
        ops.append((dy.t(), x))
        if i > 0:
            ops.append((dy, w))
    return timed(lambda: [torch.matmul(a, b) for a, b in ops], 300)

rows = []
for p in ["fp32", "tf32", "bf16"]:
    d = dptrain_stats(p)
    t, g = torch_step_ms(p), gemm_ms(p)
    rows.append((p, d, t, g))

print(f"\n### {torch.cuda.get_device_name()} — MLP 784-256-256-10, batch 128, Adam "
      f"(torch {torch.__version__})\n")
print("| precision | dptrain step ms | PyTorch eager step ms | dptrain / PyTorch samples/s | "
      "dptrain fwd+bwd ms (device events) | bare cuBLAS 8 GEMMs ms (torch.matmul) | "
      "fwd+bwd / GEMMs | data wait share of step |")
print("|---|---|---|---|---|---|---|---|")
for p, d, t, g in rows:
    ds = f"{d[0]:.3f}" if d else "n/a"
    ratio = f"{t / d[0]:.2f}" if d else "n/a"
    fb = f"{d[1]:.3f}" if d else "n/a"
    fg = f"{d[1] / g:.2f}" if d and g > 0 else "n/a"
    dw = f"{d[2]:.3f}" if d else "n/a"
    print(f"| {p} | {ds} | {t:.3f} | {ratio} | {fb} | {g:.3f} | {fg} | {dw} |")
print("\ndptrain step ms = 128 / median samples_per_s of the train events; it includes the "
      "host data path. The fwd+bwd column is device time between phase events (loss and bias "
      "kernels included), against the step's 8 GEMMs alone. PyTorch keeps its batch on the GPU; "
      "its bf16 row uses autocast. One GPU: the 2-rank rows of docs/performance.md (DDP, "
      "gradient exchange, weak scaling) need 2 GPUs.")
PY
exit $status
