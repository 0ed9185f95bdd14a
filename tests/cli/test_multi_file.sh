# A set split over files (tools/split_dataset.py): the `.txt` list and the
# virtual-dataset file train bitwise like the single file, for every
# shuffle, with block shuffling streaming blocks across file boundaries and
# with every rank reading its own rows. Bad input stops every rank with
# exit 3 and one message naming the file: a listed file missing or of
# another layout, a virtual dataset whose source is gone, an empty list.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/d.h5" --n 250 --val-n 40 --shape 6 --classes 3 --dtype float32 --seed 9
"$PYTHON" "$DPTRAIN_SOURCE_DIR/tools/split_dataset.py" "$WORK/d.h5" "$WORK/split" --parts 4 >/dev/null
[[ $(wc -l <"$WORK/split/d.txt") -eq 4 ]] || fail "the list does not name 4 files"

train=(train --model dense:16,tanh,dense:3 --batch-size 26 --epochs 2 --seed 4 --device cpu
       --threads 1 --log-every 1000)
# Blocks of 16 rows: the parts hold 62 or 63 rows, so blocks straddle files.
for case in "full 1024 rank0" "block 0 rank0" "none 0 rank0" "block 0 all"; do
  read -r shuffle cache readers <<<"$case"
  opts=(--shuffle "$shuffle" --input-cache-mb "$cache" --shuffle-block-rows 16
        --shuffle-window-blocks 4 --input-readers "$readers")
  run 3 120 "${train[@]}" "${opts[@]}" --data "$WORK/d.h5" --save "$WORK/one.h5"
  expect_rc 0 "one file, $case"
  for data in d.txt d-virtual.h5; do
    # From another folder: the list's and the virtual file's relative names
    # resolve from their own folder, not the working directory.
    (cd / && run 3 120 "${train[@]}" "${opts[@]}" --data "$WORK/split/$data" --save "$WORK/many.h5" &&
       expect_rc 0 "$data, $case")
    compare_models "$WORK/many.h5" "$WORK/one.h5" exact || fail "$data, $case: differs from one file"
  done
done
# The tool's parts and virtual file hold the input's rows exactly.
"$PYTHON" - "$WORK/d.h5" "$WORK/split/d-virtual.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    for s in ("train", "test"):
        for k in ("features", "labels"):
            assert np.array_equal(a[s][k][()], b[s][k][()]), (s, k)
PY

# inspect sums the list's sets.
run 1 60 inspect "$WORK/split/d.txt"
expect_rc 0 "inspect a list"
grep -q "list of 4 data files, 2 sets" "$OUT" && grep -q "set train: N = 250" "$OUT" || { cat "$OUT"; fail "inspect of the list"; }

# --- bad input: exit 3 on both ranks, one message naming the file -------------
bad() {  # bad WHAT DATA MESSAGE
  run 2 60 "${train[@]}" --steps 2 --data "$2"
  expect_rc 3 "$1"
  expect_one_error "$3"
}
cp -r "$WORK/split" "$WORK/gone"
rm "$WORK/gone/d-002.h5"
bad "a listed file missing" "$WORK/gone/d.txt" "$WORK/gone/d-002.h5: no such file"
bad "a virtual dataset whose source is gone" "$WORK/gone/d-virtual.h5" \
  "source file $WORK/gone/d-002.h5 of the virtual dataset"
printf '# no files yet\n\n' >"$WORK/empty.txt"
bad "an empty list" "$WORK/empty.txt" "$WORK/empty.txt: lists no data files"
synthetic "$WORK/split/wide.h5" --n 30 --val-n 5 --shape 7 --classes 3 --dtype float32 --seed 1
synthetic "$WORK/split/bytes.h5" --n 30 --val-n 5 --shape 6 --classes 3 --dtype uint8 --seed 1
for odd in wide bytes; do
  { cat "$WORK/split/d.txt"; echo "$odd.h5"; } >"$WORK/split/$odd.txt"
  bad "a listed file of another layout ($odd)" "$WORK/split/$odd.txt" \
    "$WORK/split/$odd.h5: /train holds"
  grep -q "every listed file must hold the same layout" "$ERR" || fail "$odd: message"
done
echo PASS
