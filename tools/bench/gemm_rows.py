# Implements: the GEMM rows of tools/bench/bench.py: dptrain_gemm_rate of
# this build (its CPU GEMM library) against the same binary built with
# OpenBLAS, under each OpenBLAS kernel the CPU can run (OPENBLAS_CORETYPE),
# one thread, median GFLOP/s per shape.
import json
import os
import statistics

# OpenBLAS kernels the GEMM rows try, with the /proc/cpuinfo flags each needs.
OPENBLAS_KERNELS = [("Prescott", []), ("Haswell", ["avx2", "fma"]), ("Zen", ["avx2", "fma"]),
                    ("SkylakeX", ["avx512bw", "avx512vl"]),
                    ("Cooperlake", ["avx512bw", "avx512vl", "avx512_bf16"])]


def rates(binary, repeats, run, env=None):
    """{(shape, op): [GFLOP/s per repeat]} and the library line, from dptrain_gemm_rate."""
    found, library = {}, ""
    for _ in range(repeats):
        out, _ = run([binary, "--threads", "1"], 300, env)
        for line in out.splitlines():
            obj = json.loads(line)
            found.setdefault((obj["shape"], obj["op"]), []).append(obj["gflops"])
            library = obj["library"]
    return found, library


def table(args, run, log):
    """One row per GEMM shape: this build's library against the best OpenBLAS
    kernel forced by hand (OPENBLAS_CORETYPE), 1 thread, median GFLOP/s."""
    ours_bin = args.gemm_rate or os.path.join(args.build_dir, "tools", "bench", "dptrain_gemm_rate")
    if not os.access(ours_bin, os.X_OK):
        return [{"row": "GEMM rates", "status": "not built", "note": f"{ours_bin} not found"}], []
    flags = set(open("/proc/cpuinfo").read().split())
    ours, library = rates(ours_bin, args.repeats, run)
    base = {}
    if args.openblas_gemm_rate and os.access(args.openblas_gemm_rate, os.X_OK):
        for kernel, needs in OPENBLAS_KERNELS:
            if all(f in flags for f in needs):
                base[kernel], _ = rates(args.openblas_gemm_rate, args.repeats, run,
                                        {"OPENBLAS_CORETYPE": kernel})
                log(f"GEMM rates with OpenBLAS {kernel} measured")
    rows = []
    for (shape, op), rs in ours.items():
        mine = statistics.median(rs)
        by_kernel = {k: statistics.median(v[(shape, op)]) for k, v in base.items()}
        best = max(by_kernel, key=by_kernel.get) if by_kernel else None
        rows.append({"row": f"GEMM {shape} {op}, 1 thread", "ours": mine,
                     "baseline": by_kernel[best] if best else "–", "unit": "GFLOP/s",
                     "ratio": mine / by_kernel[best] if best else None, "target": ">= 1.0",
                     "ours_is": library, "baseline_is": f"OpenBLAS, {best} kernel" if best else "–",
                     "note": "OpenBLAS kernels: " + ", ".join(f"{k} {v:.1f}" for k, v in by_kernel.items())
                             if by_kernel else "no OpenBLAS build given (--openblas-gemm-rate)"})
    return rows, [{"gemm_rates": {"ours": {f"{k[0]} {k[1]}": v for k, v in ours.items()},
                                  "openblas": {kern: {f"{k[0]} {k[1]}": v for k, v in r.items()}
                                               for kern, r in base.items()}}}]
