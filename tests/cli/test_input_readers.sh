# --input-readers rank0 | node | all train on the same global batches:
# bitwise the same weights and optimizer state, for every shuffle, cached or
# streamed, float32 or uint8 features, shards even or not (3 and 4 ranks).
# (The same on simulated nodes: test_simnodes.sh.) A reader that cannot open
# the set, or sees another one, stops every rank with exit 3 at start-up; one
# that meets a damaged chunk mid-run ends the job with exit 3.
source "$(dirname "$0")/lib.sh"

synthetic "$WORK/f.h5" --n 230 --val-n 40 --shape 6 --classes 3 --dtype float32 --seed 3
synthetic "$WORK/u.h5" --n 230 --val-n 40 --shape 4,4 --classes 3 --dtype uint8 --seed 5
for data in f u; do
  for case in "full 1024" "none 0" "block 0" "full 0"; do
    read -r shuffle cache <<<"$case"
    for np in 3 4; do
      for readers in rank0 node all; do
        run $np 120 train --data "$WORK/$data.h5" --model dense:8,relu,dense:3 --batch-size 26 \
          --epochs 2 --lr 0.01 --seed 4 --device cpu --threads 1 --shuffle "$shuffle" \
          --input-cache-mb "$cache" --shuffle-block-rows 16 --shuffle-window-blocks 3 \
          --input-readers $readers --save "$WORK/$readers.h5"
        expect_rc 0 "$data $shuffle cache $cache on $np ranks, --input-readers $readers"
        [[ $readers == rank0 ]] || grep -q "input readers $readers ($([[ $readers == all ]] && echo $np || echo 1))" "$OUT" ||
          { cat "$OUT"; fail "summary does not name the readers"; }
      done
      for readers in node all; do
        same_state "$WORK/$readers.h5" "$WORK/rank0.h5" ||
          fail "$data $shuffle cache $cache on $np ranks: --input-readers $readers differs from rank0"
      done
    done
  done
done

# A reader (ranks 2 and 3 here, given another --data) whose file is missing,
# or holds another set: every rank stops at start-up with exit 3.
synthetic "$WORK/other.h5" --n 99 --val-n 40 --shape 6 --classes 3 --dtype float32 --seed 3
common=(train --model dense:8,relu,dense:3 --batch-size 26 --steps 3 --seed 4 --device cpu
        --threads 1 --input-readers all)
for bad in missing.h5 other.h5; do
  set +e
  timeout -k 5 60 "$MPIEXEC" --oversubscribe -n 2 "$DPTRAIN" "${common[@]}" --data "$WORK/f.h5" : \
    -n 2 "$DPTRAIN" "${common[@]}" --data "$WORK/$bad" </dev/null >"$WORK/out.txt" 2>"$WORK/err.txt"
  RC=$?
  set -e
  OUT=$WORK/out.txt ERR=$WORK/err.txt
  expect_rc 3 "a reader with $bad"
  grep -q "rank [23]\] .*$bad" "$ERR" || { cat "$ERR"; fail "the error does not name $bad"; }
  grep -q "rank [01]\]" "$ERR" && { cat "$ERR"; fail "a rank with the right file reported an error"; }
done
grep -q "every input reader must see the same set" "$ERR" || { cat "$ERR"; fail "other.h5: message"; }

# A reader meets a damaged chunk mid-run (its copy of the file has the last
# chunk flipped, which ranks 2 and 3 need for the last batch, 9 of 9, streaming; rank 0
# validated a good copy): the job ends with exit 3 and that reader's message
# naming its file, no rank left waiting.
"$PYTHON" - "$WORK/f.h5" "$WORK/damaged.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as src, h5py.File(sys.argv[2], "w") as out:
    for s in ("train", "test"):
        x = src[s]["features"][()]
        out.create_dataset(f"{s}/features", data=x, chunks=(10,) + x.shape[1:], fletcher32=True)
        out[f"{s}/labels"] = src[s]["labels"][()]
    d = out["train/features"]
    offset = d.id.get_chunk_info(d.id.get_num_chunks() - 1).byte_offset
with open(sys.argv[2], "r+b") as f:
    f.seek(offset + 4)
    f.write(b"\x13\x37\x42\x7f")
PY
stream=(train --model dense:8,relu,dense:3 --batch-size 26 --epochs 1 --seed 4 --device cpu
        --threads 1 --input-readers all --shuffle none --input-cache-mb 0 --log-every 1)
set +e
timeout -k 5 60 "$MPIEXEC" --oversubscribe -n 2 "$DPTRAIN" "${stream[@]}" --data "$WORK/f.h5" : \
  -n 2 "$DPTRAIN" "${stream[@]}" --data "$WORK/damaged.h5" </dev/null >"$WORK/out.txt" 2>"$WORK/err.txt"
RC=$?
set -e
expect_rc 3 "a reader's damaged chunk mid-run"
grep -q "rank [23]\] .*damaged.h5: /train/features" "$ERR" || { cat "$ERR"; fail "the error does not name the damaged file"; }
# Steps 1-7 ran; the error surfaced in step 8, which starts moving batch 9.
grep -q "^step 7/9" "$OUT" && ! grep -q "^step 8/9" "$OUT" || { cat "$OUT"; fail "the damaged chunk was not met mid-run"; }
echo PASS
