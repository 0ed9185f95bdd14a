# Bad command lines and config files exit 2 on every rank with one message
# naming the option, quickly.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 64 --val-n 16 --shape 3 --classes 2 --dtype float32 --seed 1
check() {  # check NP SUBSTRING ARGS...
  local np=$1 what=$2
  shift 2
  local t0=$SECONDS
  run "$np" 60 "$@"
  expect_rc 2 "$*"
  expect_one_error "$what"
  ((SECONDS - t0 < 30)) || fail "$* took $((SECONDS - t0))s"
}
for np in 1 2 3; do
  check $np "--no-such-option" train --data "$WORK/d.h5" --no-such-option 1
  check $np "batch-size" train --data "$WORK/d.h5" --batch-size -4
  check $np "batch-size" train --data "$WORK/d.h5" --batch-size many
  check $np "--optimizer 'lamb'" train --data "$WORK/d.h5" --optimizer lamb
  check $np "unknown command" frobnicate
  check $np "needs --data" train
  check $np "dense:0" train --data "$WORK/d.h5" --model dense:0
  check $np "softmax" train --data "$WORK/d.h5" --model dense:4,softmax,dense:2
  check $np "--nesterov needs" train --data "$WORK/d.h5" --optimizer sgd --nesterov
done
check 2 "bucket-mb" train --data "$WORK/d.h5" --bucket-mb -1
check 2 "--eval-every must be >= 0" train --data "$WORK/d.h5" --eval-every -3
check 2 "--eval-batches must be >= 0" train --data "$WORK/d.h5" --eval-batches -1
check 2 "--attention 'flash'" train --data "$WORK/d.h5" --attention flash
# The fused attentions run on CUDA only; asked for on the CPU: exit 2.
check 2 "--attention fused needs --device cuda" train --data "$WORK/d.h5" --device cpu --attention fused
# CUDA graphs: on or off, and on only where the device records (cuda).
check 2 "--cuda-graphs 'maybe' is not one of: off, on" train --data "$WORK/d.h5" --cuda-graphs maybe
check 2 "--cuda-graphs on needs --device cuda" train --data "$WORK/d.h5" --device cpu --cuda-graphs on
check 2 "bucket-mb" train --data "$WORK/d.h5" --bucket-mb 1e30
printf 'data = %s\nbogus-key = 3\n' "$WORK/d.h5" >"$WORK/bad.ini"
check 2 "bogus-key" train --config "$WORK/bad.ini"
check 2 "cannot open config" train --config "$WORK/missing.ini"
# A model whose output width does not fit the labels (classes 0..1 need 2).
run 2 60 train --data "$WORK/d.h5" --model dense:1 --steps 1
expect_rc 3 "labels outside the model's outputs"
expect_one_error "labels"
# --device cuda on a machine without a GPU (or a build without CUDA): exit 2.
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  run 2 60 train --data "$WORK/d.h5" --device cuda --steps 1
  expect_rc 2 "--device cuda without a GPU"
  grep -q "device cuda" "$ERR" || fail "no message about --device cuda"
  run 2 60 train --data "$WORK/d.h5" --device auto --steps 2 --log-every 1
  expect_rc 0 "--device auto falls back to the CPU"
  grep -q "device cpu" "$OUT" || fail "--device auto did not pick the cpu"
fi
echo PASS
