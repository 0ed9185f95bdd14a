# Every malformed data file of docs/design.md section 3 is rejected with exit 3 on
# every rank, one message naming the dataset, within seconds, on 1..3 ranks.
source "$(dirname "$0")/lib.sh"

"$PYTHON" "$DPTRAIN_SOURCE_DIR/tools/make_bad_data.py" "$WORK/bad" >/dev/null
[[ -s "$WORK/bad/manifest.tsv" ]] || fail "make_bad_data.py wrote no manifest"
count=0
while IFS=$'\t' read -r file expect loss; do
  [[ -z "$file" || "$file" == \#* ]] && continue
  out=10
  [[ $loss == mse ]] && out=2
  for np in 1 2 3; do
    t0=$SECONDS
    run "$np" 60 train --data "$WORK/bad/$file" --model dense:4,relu,dense:$out --loss "$loss" --steps 2
    expect_rc 3 "$file on $np ranks"
    expect_one_error "$expect"
    grep -q "$file" "$ERR" || fail "$file: the message does not name the file"
    ((SECONDS - t0 < 30)) || fail "$file took $((SECONDS - t0))s"
  done
  count=$((count + 1))
done <"$WORK/bad/manifest.tsv"
((count >= 10)) || fail "only $count malformed files tested"
run 2 60 train --data "$WORK/no-such-file.h5" --steps 1
expect_rc 3 "missing file"
expect_one_error "no-such-file.h5"
echo "PASS ($count malformed files)"
