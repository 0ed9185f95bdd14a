# --recompute blocks against the plain run, and the memory plan:
# - 20 steps with and without recomputation end with the same weights, bn
#   running statistics and optimizer state bit for bit: an MLP with top-level
#   dropout, a CNN with bn and dropout inside residual blocks (global bn, so
#   the recomputed forward must reuse the batch statistics, not sum them
#   again), and a GPT; on 1 and 3 ranks, with --accumulate 2 and with
#   --shard-optimizer. A recomputed forward runs the same kernels on the same
#   input, and dropout draws from (seed, epoch, row), so nothing may differ.
# - a run with recomputation resumed halfway ends where the straight one
#   without it does, bit for bit;
# - the start-up line plans less activation memory with recomputation, and
#   the summary's measured high-water mark of the backend's buffers is within
#   10% of the plan (parameters, gradients, optimizer state, activations);
# - --plan-only for jobs/text_gpt.ini's model at batch 32 plans activations
#   with --recompute blocks at most 0.3x of those without (the issue's
#   target), trains nothing, and --fit-gib finds over 2.5x the rows with
#   recomputation (the unit tests check the plan against allocated models);
#   inspect --ranks P of a checkpoint plans what --plan-only plans.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 250 --val-n 40 --shape 6 --classes 3 --dtype float32 --seed 9
synthetic "$WORK/img.h5" --n 120 --val-n 20 --shape 2,8,8 --classes 3 --dtype float32 --seed 5
random_tokens "$WORK/tok.h5" 40 9 90 14 3
random_tokens "$WORK/text.h5" 256 65 64 8 4
MLP=(--data "$WORK/d.h5" --model dense:17,tanh,dropout:0.3,dense:3 --batch-size 26)
CNN=(--data "$WORK/img.h5" --batch-size 22
     --model "conv:4:3:1:1,bn,relu,res(conv:4:3:1:1,bn,relu,dropout:0.2,conv:4:3:1:1,bn),res(conv:6:3:2:1,bn,relu),avgpool:4,flatten,dense:3")
GPT=(--data "$WORK/tok.h5" --batch-size 14
     --model "embed:12,pos,res(ln,attn:2:causal),res(ln,dense:24,gelu:tanh,dropout:0.1,dense:12),res(ln,attn:3),ln,dense:40")
ADAMW=(--optimizer adamw --lr 0.01 --weight-decay 0.1 --weight-decay-params matrices --clip-grad-norm 0.5)
COMMON=(--seed 4 --device cpu --threads 1 --log-every 10 --val-set "")

# train NP NAME ARGS...: a 20-step run on NP ranks that must succeed, saved as NAME.h5
train() {
  local np=$1 name=$2
  shift 2
  run "$np" 120 train "$@" "${COMMON[@]}" --steps 20 --save "$WORK/$name.h5" --metrics "$WORK/$name.jsonl"
  expect_rc 0 "$name"
}

# The same run with and without recomputation: NP ARGS...
both() {
  local np=$1
  shift
  train "$np" plain "$@"
  train "$np" recomputed "$@" --recompute blocks
  same_state "$WORK/recomputed.h5" "$WORK/plain.h5" || fail "recomputed differs on $np ranks: $*"
}
for np in 1 3; do
  both $np "${MLP[@]}" "${ADAMW[@]}"
  both $np "${CNN[@]}" --optimizer adam --lr 0.01
  both $np "${GPT[@]}" "${ADAMW[@]}"
done
both 2 "${GPT[@]}" "${ADAMW[@]}" --accumulate 2
both 3 "${CNN[@]}" --optimizer sgd --momentum 0.9 --lr 0.05 --shard-optimizer

# The start-up line of the recomputed GPT run names both plans, and the
# summary's measured buffers stay within 10% of the planned total.
grep -q "activations .* kept for backward, .* without recomputation" "$OUT" || fail "no recompute plan in the memory line"
"$PYTHON" - "$WORK/plain.jsonl" "$WORK/recomputed.jsonl" <<'PY'
import sys, json
def memory(path):
    return [json.loads(l) for l in open(path) if '"summary"' in l][-1]["memory_mib"]
plain, recomputed = memory(sys.argv[1]), memory(sys.argv[2])
for m in (plain, recomputed):
    planned = 2 * m["params"] + m["optimizer"] + m["activations"]
    ratio = m["peak_buffers"] / planned
    print(f"planned {planned:.3f} MiB, measured {m['peak_buffers']:.3f} MiB ({ratio:.3f})")
    assert 0.9 <= ratio <= 1.1, m
assert recomputed["activations"] < plain["activations"], (plain, recomputed)
PY

# Resumed with recomputation: the straight plain run, bit for bit.
run 3 120 train "${GPT[@]}" "${ADAMW[@]}" "${COMMON[@]}" --steps 9 --recompute blocks --save "$WORK/r9.h5"
expect_rc 0 "recomputed steps 0-9"
run 3 120 train "${GPT[@]}" "${ADAMW[@]}" "${COMMON[@]}" --steps 20 --recompute blocks --resume "$WORK/r9.h5" --save "$WORK/r20.h5"
expect_rc 0 "recomputed steps 9-20"
grep -q "resuming from" "$OUT" || fail "the second run did not resume"
train 3 straight "${GPT[@]}" "${ADAMW[@]}"
same_state "$WORK/r20.h5" "$WORK/straight.h5" || fail "a resumed recomputed run left the stream"

# --plan-only: the text job's model at batch 32 on one rank.
TEXT=(--config "$DPTRAIN_SOURCE_DIR/jobs/text_gpt.ini" --data "$WORK/text.h5" --device cpu --save "")
run 1 60 train "${TEXT[@]}" --plan-only --fit-gib 0.5
expect_rc 0 "--plan-only"
cat "$OUT"
grep -q "memory plan of one rank of 1, batch 32" "$OUT" || fail "no plan header"
ratio=$(sed -n 's/.*activations for 32 rows: kept for backward .*, with --recompute blocks .* (\([0-9.]*\)x); workspace.*/\1/p' "$OUT")
[[ -n $ratio ]] || fail "no activation ratio in the plan"
"$PYTHON" -c "import sys; sys.exit(0 if float('$ratio') <= 0.3 else 1)" ||
  fail "recomputation keeps ${ratio}x of the activations, above the 0.3x target"
! grep -q "^done:" "$OUT" || fail "--plan-only trained"
fit=$(sed -n 's/.*largest micro-batch per rank in 0.5 GiB with --recompute blocks: \([0-9]*\) rows.*/\1/p' "$OUT")
plain_fit=$(sed -n 's/.*largest micro-batch per rank in 0.5 GiB: \([0-9]*\) rows.*/\1/p' "$OUT")
[[ -n $fit && -n $plain_fit && $fit -gt $((5 * plain_fit / 2)) ]] ||
  fail "recomputation should fit over 2.5x the rows in 0.5 GiB (got '$plain_fit' and '$fit')"

# inspect --ranks 2 of the GPT job's checkpoint plans the activations that
# --plan-only --plan-ranks 2 plans for the job (both: 7 rows a rank).
run 1 60 train "${GPT[@]}" "${ADAMW[@]}" "${COMMON[@]}" --steps 1 --save "$WORK/g1.h5"
expect_rc 0 "one step to inspect"
run 1 60 inspect "$WORK/g1.h5" --ranks 2
expect_rc 0 "inspect --ranks 2"
inspected=$(sed -n 's/^  activations: .* for 7 rows a rank (batch 14): \(.*\) kept for backward.*/\1/p' "$OUT")
inspected_rc=$(sed -n 's/^  recomputed: .* with --recompute blocks: \(.*\) kept,.*/\1/p' "$OUT")
run 1 60 train "${GPT[@]}" "${ADAMW[@]}" "${COMMON[@]}" --plan-only --plan-ranks 2
expect_rc 0 "--plan-only --plan-ranks 2"
planned=$(sed -n 's/.*activations for 7 rows: kept for backward \(.*\), with --recompute blocks \(.*\) (.*x); workspace.*/\1|\2/p' "$OUT")
[[ -n $inspected && "$inspected|$inspected_rc" == "$planned" ]] ||
  fail "inspect plans '$inspected|$inspected_rc', --plan-only '$planned'"

# Bad input: an unknown mode, and the plan's options without --plan-only.
run 1 30 train "${MLP[@]}" "${COMMON[@]}" --recompute layers
expect_rc 2 "--recompute layers"
expect_one_error "--recompute"
run 1 30 train "${MLP[@]}" "${COMMON[@]}" --fit-gib 4
expect_rc 2 "--fit-gib without --plan-only"
expect_one_error "--plan-only"
echo "recompute: all checks passed"
