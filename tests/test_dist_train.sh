#!/usr/bin/env bash
# Data-parallel `wgml train` under mpirun, on a synthetic data set of 1280 training images:
#   - 2 ranks x 64 examples give the losses of 1 rank x 128 (the same global batch) within
#     1e-5 relative over 20 steps, and the ranks end with bit-identical parameters (the tool
#     compares their checksums and says so);
#   - rank 0 prints every rank's waits in one line (which rank the others wait for);
#   - a 2-rank run resumed from its checkpoint ends byte for byte where the unbroken one ends
#     (the halves reducing in many small buckets, the unbroken run in one);
#   - the overlapped all-reduce (default) and the blocking one (WGML_DIST_OVERLAP=0) end with
#     the same gpt checkpoint byte for byte, in one bucket or many, with the step's end
#     left in flight until the next step's first bucket (the default) or not
#     (WGML_DIST_DEFER=0), with one thread or 3 a rank (WGML_DIST_THREADS);
#   - ranks with different data-parallel settings (bucket sizes) are refused on every rank;
#   - a rank that fails (a bad data path on rank 1 only) makes mpirun exit non-zero, with a
#     message naming the rank, instead of leaving rank 0 waiting in a collective;
#   - a process whose launcher's variables say 2 ranks (PMI_SIZE=2), but MPI one, is refused;
#   - a global batch that does not split evenly over the ranks is refused;
#   - the blocking all-reduce goes through MPI_Allreduce (WGML_DIST_SHM=0), the others through
#     wgml's shared-memory reduction: the same checkpoint byte for byte;
#   - mixed precision (loss scaling): 2 ranks within 1e-4 of 1 rank's losses with the same
#     skipped steps (small buckets, each step's end in flight: the next step scales its loss
#     by what that end writes); with the gradients through host memory as f16
#     (WGML_DIST_F16=1, each step's end waited for in it), 1e-3;
#   - the collectives (tests/dist_ranks.c) on 2 and 3 ranks;
#   - the same build under MPICH's launcher (MPICH_MPIEXEC, where installed), the MPI library
#     it opens MPICH's: the checkpoints of Open MPI's runs byte for byte (through MPI, not
#     shared memory), a failing rank ends every rank, the collectives on 2 and 3 ranks, and a
#     program that links Open MPI started by it is refused;
#   - no shared-memory segment is left in /dev/shm by any of these runs, failed ones included.
# Usage: test_dist_train.sh WGML_BINARY MPIEXEC [PYTHON [DIST_RANKS [DIST_RANKS_LAUNCHED [MPICH_MPIEXEC]]]]
#        (MPIEXEC: Open MPI's; DIST_RANKS links Open MPI, DIST_RANKS_LAUNCHED no MPI)
set -u

wgml=$1
mpiexec=$2
py=${3:-python3}
ranks_prog=${4:-} # tests/dist_ranks.c: the collectives across 2 and 3 ranks
ranks_launched=${5:-} # the same, linking no MPI: the library opens the launcher's
mpich=${6:-}          # MPICH's mpiexec (Hydra)
shm_before=$(ls /dev/shm 2>/dev/null | grep -c '^wgml-dist-')
. "$(dirname "$0")/cli_checks.sh"  # $work, fail, checks_done

# Ranks share the machine's cores with lavapipe's threads: no binding of a rank to one core.
mpi=("$mpiexec" --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)

fake_fmnist "$py" "$work/data" 1280 64 19 1  # pixels that carry a little of the label: the loss moves

args=(train --data "$work/data" --hidden 32 --batch 128 --lr 3e-3)
# 1 rank, then 2: 10 steps an epoch, 2 epochs
timeout 120 "$wgml" "${args[@]}" --epochs 2 --out "$work/one" >"$work/one.log" 2>&1 || fail "1 rank: exit $? ($(tail -2 "$work/one.log"))"
timeout 120 "${mpi[@]}" -np 2 "$wgml" "${args[@]}" --epochs 2 --out "$work/two" >"$work/two.log" 2>&1 ||
  fail "2 ranks: exit $? ($(tail -3 "$work/two.log"))"
grep -q "replicas: parameters identical on 2 ranks" "$work/two.log" || fail "2 ranks: no replica check in the output: $(tail -3 "$work/two.log")"
grep -q "gradient all-reduce on 2 ranks" "$work/two.log" || fail "2 ranks: no all-reduce timing in the output"
# mpirun gives ranks a pseudo-terminal for stdout: no progress bar's \r may reach the file
! grep -q $'\r' "$work/two.log" || fail "2 ranks: carriage returns in the log (a progress bar under mpirun)"
"$py" - "$work/one/metrics.csv" "$work/two/metrics.csv" <<'PY' || fail "2 ranks x 64 and 1 rank x 128 give different losses"
import csv, sys
one, two = ([row for row in csv.DictReader(open(p))] for p in sys.argv[1:3])
assert len(one) == len(two) == 20, f"{len(one)} and {len(two)} steps, want 20"
worst = 0.0
for a, b in zip(one, two):
    la, lb = float(a["loss"]), float(b["loss"])
    worst = max(worst, abs(la - lb) / abs(la))
    assert a["accuracy"] == b["accuracy"], f"step {a['step']}: accuracy {a['accuracy']} and {b['accuracy']}"
print(f"losses over 20 steps: worst relative difference {worst:.3g}")
assert worst <= 1e-5, f"worst relative difference {worst} > 1e-5"
assert float(one[-1]["loss"]) < float(one[0]["loss"]), "the loss did not go down"
PY

# stop after epoch 1, resume on 2 ranks: the same checkpoint as the unbroken 2-rank run; both
# halves reduce in buckets of one parameter each (4 a step) with MPI called on
# the main thread (WGML_DIST_INLINE, what an MPI without thread support gets), the unbroken
# run in one bucket from the reducer's thread
timeout 120 "${mpi[@]}" -x WGML_DIST_BUCKET_MB=0.0001 -x WGML_DIST_INLINE=1 -np 2 "$wgml" "${args[@]}" --epochs 1 --out "$work/part" >"$work/part.log" 2>&1 ||
  fail "2 ranks, epoch 1: exit $? ($(tail -3 "$work/part.log"))"
timeout 120 "${mpi[@]}" -x WGML_DIST_BUCKET_MB=0.0001 -x WGML_DIST_INLINE=1 -np 2 "$wgml" train --data "$work/data" --epochs 2 --resume "$work/part/checkpoint.safetensors" \
  --out "$work/part" >"$work/resume.log" 2>&1 || fail "2 ranks, resumed: exit $? ($(tail -3 "$work/resume.log"))"
grep -q "overlapped: .*(4.0 buckets" "$work/resume.log" || fail "2 ranks, resumed: not 4 buckets a step: $(grep all-reduce "$work/resume.log")"
cmp -s "$work/two/checkpoint.safetensors" "$work/part/checkpoint.safetensors" ||
  fail "the resumed 2-rank run's checkpoint differs from the unbroken run's"

# same_metrics ONE TWO STEPS TOL SAME_COLUMN WHAT: two runs' metrics.csv have STEPS rows whose
# loss, gradient norm and validation loss agree within TOL (relative), and SAME_COLUMN (if
# given) equal
same_metrics() {
  "$py" - "$@" <<'PY'
import csv, sys
p1, p2, steps, tol, same, what = sys.argv[1:7]
one, two = ([row for row in csv.DictReader(open(p))] for p in (p1, p2))
assert len(one) == len(two) == int(steps), f"{len(one)} and {len(two)} steps, want {steps}"
worst = 0.0
for a, b in zip(one, two):
    for key in ("loss", "grad_norm", "val_loss"):
        if a[key] or b[key]:
            x, y = float(a[key]), float(b[key])
            worst = max(worst, abs(x - y) / abs(x))
    if same:
        assert a[same] == b[same], f"step {a['step']}: {same} {a[same]} and {b[same]}"
print(f"{what} over {steps} steps: worst relative difference {worst:.3g}")
assert worst <= float(tol), f"worst relative difference {worst} > {tol}"
PY
}

# wgml gpt train the same way: 2 ranks x 4 sequences against 1 rank x 8, 20 steps
mkdir -p "$work/text"
fake_text "$work/text/a" 300
gpt=(gpt train --data "$work/text" --layers 1 --heads 2 --width 32 --block 16 --batch 8 --dropout 0 --eval-every 5
     --eval-batches 1 --steps 20 --lr 3e-3)
timeout 120 "$wgml" "${gpt[@]}" --out "$work/gpt1" >"$work/gpt1.log" 2>&1 || fail "gpt, 1 rank: exit $? ($(tail -2 "$work/gpt1.log"))"
timeout 120 "${mpi[@]}" -x WGML_DIST_DEFER=0 -np 2 "$wgml" "${gpt[@]}" --out "$work/gpt2" >"$work/gpt2.log" 2>&1 ||
  fail "gpt, 2 ranks: exit $? ($(tail -3 "$work/gpt2.log"))"
grep -q "replicas: parameters identical on 2 ranks" "$work/gpt2.log" || fail "gpt, 2 ranks: no replica check: $(tail -3 "$work/gpt2.log")"
same_metrics "$work/gpt1/metrics.csv" "$work/gpt2/metrics.csv" 20 1e-5 "" "gpt: losses, gradient norms and validation losses" ||
  fail "gpt: 2 ranks x 4 and 1 rank x 8 give different losses"

# the overlapped all-reduce (the default: buckets reduced as the backward pass finishes them;
# one bucket a step by default at this size, each step's end waited for in it:
# WGML_DIST_DEFER=0; one a parameter with small buckets, there with each step's end left in
# flight until the next step's first bucket, the default) against the blocking one after the
# whole backward pass: the same checkpoint byte for byte (two ranks' sum does not depend on
# the order, and the ranks divide alike) and the same metrics
grep -q "gradient all-reduce on 2 ranks, overlapped: .*shared memory" "$work/gpt2.log" ||
  fail "gpt, 2 ranks: not overlapped through shared memory: $(tail -2 "$work/gpt2.log")"
# every rank's waits in one line on rank 0 (which rank the others wait for)
grep -Eq "^per rank, ms/step waiting .*: rank 0 [0-9.]+ / [0-9.]+ / [0-9.]+; rank 1 [0-9.]+ / [0-9.]+ / [0-9.]+$" "$work/gpt2.log" ||
  fail "gpt, 2 ranks: no line of every rank's waits: $(grep -A1 all-reduce "$work/gpt2.log")"
timeout 120 "${mpi[@]}" -x WGML_DIST_OVERLAP=0 -x WGML_DIST_SHM=0 -np 2 "$wgml" "${gpt[@]}" --out "$work/gpt2b" >"$work/gpt2b.log" 2>&1 ||
  fail "gpt, 2 ranks, blocking all-reduce: exit $? ($(tail -3 "$work/gpt2b.log"))"
grep -q "gradient all-reduce on 2 ranks: .*MPI" "$work/gpt2b.log" || fail "gpt, 2 ranks, WGML_DIST_SHM=0: not MPI: $(tail -2 "$work/gpt2b.log")"
timeout 120 "${mpi[@]}" -x WGML_DIST_BUCKET_MB=0.001 -x WGML_DIST_THREADS=3 -np 2 "$wgml" "${gpt[@]}" --out "$work/gpt2s" >"$work/gpt2s.log" 2>&1 ||
  fail "gpt, 2 ranks, small buckets, deferred: exit $? ($(tail -3 "$work/gpt2s.log"))"
cmp -s <(cut -d, -f1-5 "$work/gpt2s/metrics.csv") <(cut -d, -f1-5 "$work/gpt2b/metrics.csv") ||
  fail "gpt: the deferred steps' metrics (loss, lr, gradient norm, validation) differ from the blocking ones'"
grep -Eq "overlapped: .*\(([5-9]|[1-9][0-9])\.0 buckets" "$work/gpt2s.log" ||
  fail "gpt, small buckets: not 5-99 buckets a step: $(grep all-reduce "$work/gpt2s.log")"
grep -q "shared memory (3 threads a rank)" "$work/gpt2s.log" ||
  fail "gpt, WGML_DIST_THREADS=3: not 3 threads: $(grep all-reduce "$work/gpt2s.log")"
cmp -s "$work/gpt2/gpt.safetensors" "$work/gpt2b/gpt.safetensors" || fail "gpt: the overlapped all-reduce ends elsewhere than the blocking one"
cmp -s "$work/gpt2s/gpt.safetensors" "$work/gpt2b/gpt.safetensors" || fail "gpt: the overlapped all-reduce in small buckets ends elsewhere than the blocking one"

# mixed precision (loss scaling): the gradients cross host memory as f32 by default, 2 ranks
# within float rounding of 1 rank's losses, skipping the same steps; as f16 when asked
# (WGML_DIST_F16=1, summed in f32), within f16's rounding of the gradients
mixed=("${gpt[@]}" --steps 12 --precision mixed)
timeout 120 "$wgml" "${mixed[@]}" --out "$work/mx1" >"$work/mx1.log" 2>&1 || fail "mixed, 1 rank: exit $? ($(tail -2 "$work/mx1.log"))"
timeout 120 "${mpi[@]}" -x WGML_DIST_BUCKET_MB=0.001 -np 2 "$wgml" "${mixed[@]}" --out "$work/mx2" >"$work/mx2.log" 2>&1 ||
  fail "mixed, 2 ranks: exit $? ($(tail -3 "$work/mx2.log"))"
grep -q "overlapped: .*shared memory .* MB a step as f32" "$work/mx2.log" ||
  fail "mixed, 2 ranks: not f32 through shared memory: $(grep all-reduce "$work/mx2.log")"
same_metrics "$work/mx1/metrics.csv" "$work/mx2/metrics.csv" 12 1e-4 skipped_steps "mixed: 2 ranks against 1 rank" ||
  fail "mixed: 2 ranks and 1 rank differ"
timeout 120 "${mpi[@]}" -x WGML_DIST_F16=1 -x WGML_DIST_THREADS=2 -x WGML_DIST_DEFER=0 -np 2 "$wgml" "${mixed[@]}" --out "$work/mx2h" >"$work/mx2h.log" 2>&1 ||
  fail "mixed, 2 ranks, f16 gradients: exit $? ($(tail -3 "$work/mx2h.log"))"
grep -q "overlapped: .*shared memory (2 threads a rank).* MB a step as f16" "$work/mx2h.log" ||
  fail "mixed, 2 ranks, WGML_DIST_F16=1: not f16 through shared memory on 2 threads: $(grep all-reduce "$work/mx2h.log")"
same_metrics "$work/mx1/metrics.csv" "$work/mx2h/metrics.csv" 12 1e-3 skipped_steps "mixed: f16 gradients on 2 ranks against 1 rank" ||
  fail "mixed: 2 ranks (f16 gradients) and 1 rank differ"

# ranks whose data-parallel settings differ (rank 1's buckets smaller) fail with a message
# on every rank, before a collective could pair calls of different sizes (Open MPI wrote
# past a buffer then, under ASan)
timeout 60 "${mpi[@]}" -np 1 "$wgml" "${gpt[@]}" --out "$work/ds" : -np 1 env WGML_DIST_BUCKET_MB=0.001 "$wgml" "${gpt[@]}" \
  --out "$work/ds" >"$work/ds.log" 2>&1
rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "ranks with different settings: exit $rc ($(tail -3 "$work/ds.log"))"
grep -q "other data-parallel settings than rank 0" "$work/ds.log" ||
  fail "ranks with different settings: no message naming them: $(tail -3 "$work/ds.log")"

# failing_rank NAME LAUNCHER...: rank 1 cannot read its data: every rank ends, non-zero, well
# before the timeout, with wgml's message naming the rank. Rank 1 writes its messages into a
# file of its own: a launcher ending the job may drop what it had yet to forward (MPICH's
# Hydra did, about one run in 30)
failing_rank() {
  local name=$1 start rc
  shift
  start=$(date +%s)
  timeout 60 "$@" -n 1 "$wgml" "${args[@]}" --out "$work/$name" : -n 1 sh -c 'exec "$@" 2>"$0"' "$work/$name.rank1" \
    "$wgml" train --data "$work/missing" --out "$work/$name" >"$work/$name.log" 2>&1
  rc=$?
  [ "$rc" != 0 ] || fail "$1, a failing rank: the launcher exited 0"
  [ "$rc" != 124 ] || fail "$1, a failing rank: still running after 60 s (a hang)"
  grep -q "rank 1 of 2 failed: stopping every rank" "$work/$name.rank1" ||
    fail "$1, a failing rank: no message naming it: $(tail -3 "$work/$name.rank1" "$work/$name.log")"
  echo "$1, a failing rank: exited $rc after $(($(date +%s) - start)) s"
}

# collectives NAME PROGRAM LAUNCHER...: tests/dist_ranks.c (sums and means against double sums
# in buckets of about 1000 floats, smaller than a tensor; broadcast; unequal sizes refused on
# every rank) on 2 and 3 ranks (3: slices that do not split evenly), with 1 and 2 threads a rank
collectives() {
  local name=$1 prog=$2 np
  shift 2
  for np in 2 3; do
    WGML_DIST_BUCKET_MB=0.004 WGML_DIST_THREADS=$((np - 1)) timeout 60 "$@" -n $np "$prog" >"$work/$name$np.log" 2>&1 ||
      fail "$1, dist_ranks on $np ranks: exit $? ($(tail -5 "$work/$name$np.log"))"
    grep -q "dist_ranks: ok" "$work/$name$np.log" || fail "$1, dist_ranks on $np ranks did not pass: $(tail -5 "$work/$name$np.log")"
  done
}

failing_rank bad "${mpi[@]}"

# a launcher's variables without their launcher (PMI_SIZE, as MPICH's Hydra sets): MPICH's
# library, opened for them, sees one rank (or is not installed); each process would be a lone
# rank of the whole batch: refused, naming the cause
PMI_SIZE=2 PMI_RANK=0 timeout 60 "$wgml" "${gpt[@]}" --out "$work/pmi" >"$work/pmi.log" 2>&1 && fail "PMI_SIZE=2 without its launcher: exit 0"
grep -Eq "launcher started 2 ranks, but MPI .* sees one|could not be loaded" "$work/pmi.log" ||
  fail "PMI_SIZE=2 without its launcher: no message: $(tail -2 "$work/pmi.log")"

# a global batch that does not split over the ranks: refused by both trainers, naming it
for cmd in "train --data $work/data --batch 127" "gpt train --data $work/text --batch 7 --steps 1"; do
  # shellcheck disable=SC2086
  timeout 60 "${mpi[@]}" -np 2 "$wgml" $cmd --out "$work/odd" >"$work/odd.log" 2>&1 && fail "$cmd on 2 ranks: exit 0"
  grep -q "does not split evenly over 2 ranks" "$work/odd.log" || fail "$cmd on 2 ranks: no message: $(tail -2 "$work/odd.log")"
done

# ranks started with other options than rank 0's: refused before any step, naming the first
# that differs (else they would train apart and be found out only by the replica check at the end)
timeout 60 "${mpi[@]}" -np 1 "$wgml" "${gpt[@]}" --out "$work/opt" : -np 1 "$wgml" "${gpt[@]}" --lr 2e-3 --out "$work/opt" \
  >"$work/opt.log" 2>&1 && fail "gpt train with --lr on rank 1 only: exit 0"
grep -q "rank 1 was started with other settings than rank 0: --lr 0.002 here" "$work/opt.log" ||
  fail "gpt train with --lr on rank 1 only: no message: $(tail -3 "$work/opt.log")"
! grep -q "^step " "$work/opt.log" || fail "gpt train with --lr on rank 1 only: it trained"
# (each checkpoint is a sync of the ranks: another --save-every on one rank would hang them)
timeout 60 "${mpi[@]}" -np 1 "$wgml" "${gpt[@]}" --out "$work/sav" : -np 1 "$wgml" "${gpt[@]}" --save-every 3 --out "$work/sav" \
  >"$work/sav.log" 2>&1 && fail "gpt train with --save-every on rank 1 only: exit 0"
grep -q "rank 1 was started with other settings than rank 0: --save-every 3 here" "$work/sav.log" ||
  fail "gpt train with --save-every on rank 1 only: no message (exit $?): $(tail -3 "$work/sav.log")"
timeout 60 "${mpi[@]}" -np 1 "$wgml" "${args[@]}" --out "$work/hid" : -np 1 "$wgml" "${args[@]}" --hidden 32,16 --out "$work/hid" \
  >"$work/hid.log" 2>&1 && fail "train with another --hidden on rank 1: exit 0"
grep -q "rank 1 was started with other settings than rank 0: --hidden (its layers) 2 here, 1 on rank 0" "$work/hid.log" ||
  fail "train with another --hidden on rank 1: no message: $(tail -3 "$work/hid.log")"

# the collectives themselves
[ -z "$ranks_prog" ] || collectives ranks "$ranks_prog" "${mpi[@]}"

# The same build started by MPICH's launcher: each process opens MPICH's library (the
# launcher's family, by its variables) and speaks its binary interface. The all-reduce goes
# through MPI here (WGML_DIST_SHM=0), blocking for the MLP (MPI_Iallreduce, MPI_Wait) and
# overlapped for the GPT (MPI_Allreduce from the reducer's thread); two ranks' sums are exact
# in any order, so both end on Open MPI's runs' checkpoints byte for byte (and so on 1
# rank's losses, checked above).
if [ -n "$mpich" ]; then
  timeout 120 env WGML_DIST_SHM=0 WGML_DIST_OVERLAP=0 "$mpich" -n 2 "$wgml" "${args[@]}" --epochs 2 --out "$work/h_two" \
    >"$work/h_two.log" 2>&1 || fail "MPICH, 2 ranks: exit $? ($(tail -3 "$work/h_two.log"))"
  grep -q "gradient all-reduce on 2 ranks: .*MPI" "$work/h_two.log" || fail "MPICH, 2 ranks: not through MPI: $(tail -3 "$work/h_two.log")"
  grep -q "replicas: parameters identical on 2 ranks" "$work/h_two.log" || fail "MPICH, 2 ranks: no replica check"
  cmp -s "$work/two/checkpoint.safetensors" "$work/h_two/checkpoint.safetensors" ||
    fail "MPICH, 2 ranks: the checkpoint differs from Open MPI's 2-rank run's"
  timeout 120 env WGML_DIST_SHM=0 "$mpich" -n 2 "$wgml" "${gpt[@]}" --out "$work/h_gpt2" >"$work/h_gpt2.log" 2>&1 ||
    fail "MPICH, gpt, 2 ranks: exit $? ($(tail -3 "$work/h_gpt2.log"))"
  grep -q "gradient all-reduce on 2 ranks, overlapped: .*MPI" "$work/h_gpt2.log" ||
    fail "MPICH, gpt, 2 ranks: not overlapped through MPI: $(grep all-reduce "$work/h_gpt2.log")"
  cmp -s "$work/gpt2b/gpt.safetensors" "$work/h_gpt2/gpt.safetensors" ||
    fail "MPICH, gpt: the overlapped all-reduce ends elsewhere than Open MPI's blocking one"
  failing_rank h_bad "$mpich"
  [ -z "$ranks_launched" ] || collectives h_ranks "$ranks_launched" "$mpich"
  # a program that links Open MPI, started by MPICH's launcher: each process would be a lone
  # rank; refused on every rank, naming the cause
  if [ -n "$ranks_prog" ]; then
    timeout 60 "$mpich" -n 2 "$ranks_prog" >"$work/h_other.log" 2>&1 && fail "MPICH's launcher, a program linking Open MPI: exit 0"
    [ "$(grep -c "launcher started 2 ranks, but MPI (Open MPI" "$work/h_other.log")" = 2 ] ||
      fail "MPICH's launcher, a program linking Open MPI: not refused by both ranks: $(tail -2 "$work/h_other.log")"
  fi
  echo "MPICH's launcher: the same checkpoints as Open MPI's, a failing rank ends the run"
fi

# every run above unlinked its segment once the ranks had mapped it (failed runs too)
shm_after=$(ls /dev/shm 2>/dev/null | grep -c '^wgml-dist-')
[ "$shm_after" -le "$shm_before" ] || fail "segments left in /dev/shm: $(ls /dev/shm | grep '^wgml-dist-' | head -3)"

checks_done
