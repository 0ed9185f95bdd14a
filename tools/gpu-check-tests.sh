# shellcheck shell=bash disable=SC2154,SC2034  # uses gpu-check.sh's row, run_for, work, mpirun, ...; sets step, tests_failed
# Implements: the test sections of tools/gpu-check.sh (sourced, not run):
# - tests: every GPU test by name, on 1 rank (2 with 2+ GPUs); then each
#   test that failed, or that the run never reached (a crash or a hang cut
#   it short), once more in a process of its own. A test that passes alone
#   failed in the whole run because of an earlier one (a CUDA error is
#   sticky: one bad launch fails every later call of the process); the
#   first that fails alone too is where to look.
# - sanitizer: the tests of dptrain's own kernels under NVIDIA's
#   compute-sanitizer, where the machine has it: memcheck (out-of-bounds
#   and misaligned device memory accesses, by our kernels and by the
#   libraries' calls on our pointers: cuBLASLt's epilogues, cuDNN's
#   attention), racecheck (shared-memory hazards between threads, as the
#   GPU really schedules them) and synccheck (barriers a thread skips). The
#   host emulation checks the same kernels in two thread orders; only a
#   GPU runs every interleaving. SANITIZE_FILTER (a gtest filter) replaces
#   the tests of every tool. Errors are a failure of the check; a tool too
#   slow for its time limit, or one that does not support the device, is
#   said so in its row and is not.

# The suites that run our kernels; those that hand our pointers to
# cuBLASLt's epilogues and cuDNN's attention (a run of their own, after
# ours: cuDNN's engines are slow to start under a sanitizer); and those
# whose kernels share memory between threads.
kernel_tests="WarpStrip.*:FusedAttention.*:CudaNorm.*:CudaLossOptim.*:CudaSequence.*:CudaKernels.*"
kernel_tests+=":CudaConvert.*:Bf16*:ParamsBf16.*:CudaRoundedOperands.*"
library_tests="CudaGemmEpilogue.*:CudaGeluEpilogue.*:CudnnAttention.*"
shared_memory_tests="WarpStrip.*:FusedAttention.*:CudaNorm.*:CudaLossOptim.*:CudaSequence.*:CudaKernels.*"
# Left out of those runs: the tf32 layer against the CPU (ten cases,
# the kernels of bf16's with another element type), whose kernels
# FusedAttention.Tf32MultipliesInTf32 takes through the tools in two.
sanitizer_leave_out="FusedAttention.Tf32MatchesTheCpu"
alone_most=12      # tests run again alone, at most, per rank count
alone_budget_s=90  # and the time they may take together

# The listing is the first MPI_Init of a real program (the smoke launch
# starts none): time-limited, its stderr kept apart and shown on failure.
list_tests() {
  local t=60 left=$((deadline - SECONDS))
  step=test-list.txt && write_table
  ((left < t)) && t=$left
  ((t > 5)) || return 125
  timeout -k 5 "$t" "${mpirun[@]}" -n 1 "$gpu_tests" --gtest_list_tests >"$work/test-list.txt" 2>"$work/test-list.err"
}
# test_result OUT NAME RC: how NAME ended in gtest's output OUT of a run
# that exited RC.
test_result() {
  local result
  if (($3 == 77)); then echo "skipped (no GPU visible)"
  elif grep -qF "[  FAILED  ] $2 (" "$1"; then echo FAILED
  elif grep -qF "[  SKIPPED ] $2 (" "$1"; then echo skipped
  elif grep -qF "[       OK ] $2 (" "$1"; then echo passed
  else result=$(outcome "$3"); [[ $result == ok ]] && result="not run"; echo "$result"; fi
}
gpu_test_rows() {  # gpu_test_rows NP LIMIT: sets unfinished, the tests that did not pass or skip
  local np=$1 out=$work/tests$1.txt rc t result ms
  unfinished=()
  # No colour codes: orterun hands its ranks a terminal, and gtest would
  # wrap "[       OK ]" in them, where the greps below look for it.
  run_for "$2" "$out" "${mpirun[@]}" -n "$np" "$gpu_tests" --gtest_color=no
  rc=$?
  for t in $names; do
    ms=$(grep -F "] $t (" "$out" | tail -1 | grep -o '([0-9]* ms)')
    result=$(test_result "$out" "$t" "$rc")
    [[ $result == passed || $result == skipped* ]] || unfinished+=("$t")
    row "tests ($np rank$( ((np > 1)) && echo s))" "$t" "$result" "${ms:-}"
  done
  if ((rc != 0 && rc != 77)); then
    note "gpu_tests on $np rank(s): exit $rc; the end of its output:"
    tail -25 "$out" >&2
    row "tests ($np ranks)" "gpu_tests exit status" "$(outcome "$rc")" "$(grep -c 'FAILED  \]' "$out") failure lines"
  fi
}
# Lines on stdin as one line for a table cell: compute-sanitizer's "====="
# margins, tabs and bars out, spaces squeezed, at most 240 characters.
one_line() { tr -s ' =\n\t|' ' ' | sed 's/^ //; s/ $//' | cut -c1-240; }
# alone_rows NP: each test of unfinished (at most alone_most, within
# alone_budget_s) in a process of its own on NP ranks.
alone_rows() {
  local np=$1 t out rc result detail first=${unfinished[0]:-} ends=$((SECONDS + alone_budget_s)) n=0
  local section="tests alone ($np rank)"
  ((np > 1)) && section="tests alone ($np ranks)"
  for t in "${unfinished[@]}"; do
    if ((++n > alone_most || SECONDS + 5 > ends)); then
      row "$section" "$((${#unfinished[@]} - n + 1)) more" skipped "not run alone: $alone_most at most, within $alone_budget_s s"
      return
    fi
    out=$work/alone$np-${t//\//_}.txt
    run_for $((ends - SECONDS < 30 ? ends - SECONDS : 30)) "$out" "${mpirun[@]}" -n "$np" "$gpu_tests" \
      --gtest_color=no --gtest_filter="$t"
    rc=$?
    result=$(test_result "$out" "$t" "$rc")
    case $result in
      passed)
        detail="passes alone: in the whole run an earlier test left the process broken"
        [[ $t == "$first" ]] || detail+=" (the first to fail there: $first)" ;;
      FAILED) detail=$(grep -m1 -A2 -E 'Failure|error:' "$out" | one_line) ;;
      *) detail=$(tail -2 "$out" | one_line) ;;
    esac
    row "$section" "$t" "$result" "$detail (logs/${out##*/})"
  done
}
tests_section() {
  local rc result
  list_tests
  rc=$?
  names=$(awk '/^[^ ]/ {suite = $1} /^  [^ ]/ {print suite $1}' "$work/test-list.txt")
  if ((rc != 0)) || [[ -z $names ]]; then
    note "gpu_tests --gtest_list_tests: exit $rc, $(wc -w <<<"$names") test names; its stderr (logs/test-list.err):"
    tail -25 "$work/test-list.err" >&2
    result=$(outcome "$rc")
    [[ $result == ok ]] && result=FAILED
    row tests "gpu_tests --gtest_list_tests" "$result" \
      "exit $rc, $(wc -w <<<"$names") test names; stderr: $(grep -v '^[[:space:]]*$' "$work/test-list.err" | tail -3 | tr '\n\t|' '   ')"
  fi
  tests_failed=0
  gpu_test_rows 1 150
  ((${#unfinished[@]})) && tests_failed=1 && alone_rows 1
  if ((ngpu >= 2)); then
    gpu_test_rows 2 90
    ((${#unfinished[@]})) && tests_failed=1 && alone_rows 2
  else
    row "tests (2 ranks)" "all GPU tests on 2 ranks" skipped "needs 2 GPUs"
  fi
}

find_sanitizer() {
  local c
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda-*/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [[ -n $c && -x $c ]] && { echo "$c"; return 0; }
  done
  return 1
}
# sanitizer_row TOOL LOG WHAT FILTER LIMIT: the tests FILTER names (WHAT
# says which) under TOOL, one rank, its output in logs/LOG.txt; the row
# says clean, or the errors and the first of them. Returns 1 where the
# tool does not support the device.
sanitizer_row() {
  local tool=$1 out=$work/$2.txt what=$3 filter=$4 limit=$5
  local rc errors api ran first missing p patterns unsupported failing
  local name="$tool ($what: logs/${out##*/})"
  [[ -n ${SANITIZE_FILTER:-} ]] && name="$tool (SANITIZE_FILTER $filter)"
  run_for "$limit" "$out" "${mpirun[@]}" -n 1 "$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 20 \
    "$gpu_tests" --gtest_color=no --gtest_filter="$filter"
  rc=$?
  if ((rc == 125)); then
    row sanitizer "$name" skipped "$(outcome 125 | sed 's/^TIMED OUT (//; s/)$//') (ONLY=sanitizer runs it alone)"
    return 0
  fi
  # compute-sanitizer ends with "ERROR SUMMARY: N errors" (racecheck with
  # "RACECHECK SUMMARY: ... (N errors, M warnings)"); a CUDA API call that
  # returned an error ("Program hit ...", a library probing) counts there too.
  errors=$(sed -n -e 's/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' \
    -e 's/^========= RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$out" | tail -1)
  api=$(grep -c '^========= Program hit ' "$out" 2>/dev/null)
  ran=$(grep -c '^\[ RUN      \] ' "$out" 2>/dev/null)
  # The first report and the line under it (where: the kernel and the offset).
  first=$(awk '/^========= [A-Za-z]/ && !/^========= (COMPUTE-SANITIZER|Program hit|Target application|ERROR SUMMARY|RACECHECK SUMMARY)/ {
    print; if ((getline next_line) > 0) print next_line; exit }' "$out" | one_line)
  missing=
  IFS=: read -ra patterns <<<"${filter%%-*}"  # the positive patterns (gtest: POSITIVE[-NEGATIVE])
  for p in "${patterns[@]}"; do
    grep -q "^\[ RUN      \] ${p//\*/.*}\$" "$out" || missing+=" $p"
  done
  unsupported=$(grep -i -m1 -E 'device (is )?not supported|not supported on this (device|GPU)' "$out")
  if [[ -n $unsupported ]] && ((ran == 0)); then
    row sanitizer "$name" skipped "${unsupported#========= }"
    return 1
  elif [[ -z $errors ]] && ((rc == 124 || rc == 137)); then
    row sanitizer "$name" "timed out" "the tool's slowness, not a failure: $ran tests started in $limit s${first:+; first report: $first}"
  elif [[ -z $errors ]]; then
    row sanitizer "$name" "FAILED (exit $rc)" "no summary from the tool: $(tail -2 "$out" | one_line)"
  elif ((errors - api > 0)); then
    row sanitizer "$name" FAILED "$((errors - api)) errors in $ran tests; the first: $first (logs/${out##*/})"
  elif [[ -n $missing ]]; then
    row sanitizer "$name" FAILED "no test matched:$missing"
  else
    failing=$(grep -c '^\[  FAILED  \] .* ([0-9]* ms)$' "$out")
    row sanitizer "$name" clean "0 errors in $ran tests$( ((api)) && echo "; CUDA API calls that returned an error: $api (logs/${out##*/})")$(
      ((failing)) && echo "; $failing tests failed under it (their rows above say how they ran without it)")"
  fi
}
sanitizer_section() {
  if ((ngpu == 0)); then
    row sanitizer "memcheck, racecheck, synccheck" skipped "no GPU"
  elif ! sanitizer=$(find_sanitizer); then
    row sanitizer "memcheck, racecheck, synccheck" skipped "no compute-sanitizer on this machine"
  else
    sanitizer_row memcheck sanitizer-memcheck "our kernels' suites" \
      "${SANITIZE_FILTER:-$kernel_tests-$sanitizer_leave_out}" 75 &&
      sanitizer_row racecheck sanitizer-racecheck "suites of kernels sharing memory" \
        "${SANITIZE_FILTER:-$shared_memory_tests-$sanitizer_leave_out}" 75 &&
      sanitizer_row synccheck sanitizer-synccheck "suites of kernels sharing memory" \
        "${SANITIZE_FILTER:-$shared_memory_tests-$sanitizer_leave_out}" 45 &&
      { [[ -n ${SANITIZE_FILTER:-} ]] ||
        sanitizer_row memcheck sanitizer-memcheck-libraries "the libraries' calls on our pointers" \
          "$library_tests" 60; }
  fi
}
