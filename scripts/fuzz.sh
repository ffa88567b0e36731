#!/usr/bin/env bash
# Fuzzes cordon's parsers of hostile input (fuzz/README.md): builds every target of fuzz/ with
# the nightly toolchain and libFuzzer (cargo-fuzz, installed when missing; no sanitizer by
# default: the code is safe Rust, and coverage-guided search runs ~3x faster without ASan),
# then runs the targets one after another, each for SECONDS_PER_TARGET, starting from its seed
# corpus fuzz/corpus/<target>/ and what earlier runs found (fuzz/work/<target>/, kept between
# runs). Prints per target: executions, coverage (libFuzzer's cov: edges, ft: features),
# corpus size and findings (crash, timeout or out-of-memory inputs, in fuzz/artifacts/<target>/).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, every target)
#
# FUZZ_SANITIZER=address builds with AddressSanitizer; FUZZ_JOBS=N runs N libFuzzer workers per
# target (the long campaign on a bigger machine); FUZZ_TMPDIR (default /dev/shm) is where targets
# make their files; FUZZ_TARGET_DIR moves the nightly build
# (default: target/fuzz); FUZZ_BUILD=0 runs the targets as last built. Exits 1 when a run found something: fix it in the product, add a
# unit test, and copy the input to fuzz/corpus/<target>/crash-<what> so the replay in
# scripts/test.sh keeps it fixed.
#
# The campaign: each run appends its executions and seconds per target to fuzz/work/ledger.tsv
# (kept with the work corpora, not committed), and the table ends with the campaign's totals per
# target. FUZZ_CAMPAIGN=N (e.g. 10000000, issue 34's goal) runs each target only until the
# ledger holds N executions for it — a target already there is skipped — so a long campaign can
# be spread over runs that are stopped and started again.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(ls fuzz/fuzz_targets | sed 's/\.rs$//')
fi
sanitizer=${FUZZ_SANITIZER:-none}
jobs=${FUZZ_JOBS:-1}
goal=${FUZZ_CAMPAIGN:-0}
case "$goal" in ''|*[!0-9]*) echo "FUZZ_CAMPAIGN must be a number of executions, not '$goal'" >&2; exit 2 ;; esac
ledger=fuzz/work/ledger.tsv
mkdir -p fuzz/work
touch "$ledger"
# The executions the ledger holds for target $1.
ledger_execs() { awk -F'\t' -v t="$1" '$2 == t {s += $3} END {print s + 0}' "$ledger"; }
tdir=${FUZZ_TARGET_DIR:-$PWD/target/fuzz}

if [ "${FUZZ_BUILD:-1}" != 0 ]; then
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
  command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz --version 0.13.2
  # -O: optimised, as a campaign runs; -a: with debug assertions, so an arithmetic overflow on
  # a hostile length is a finding rather than a silent wrap.
  cargo +nightly fuzz build -O -a -s "$sanitizer" --features libfuzzer --target-dir "$tdir"
fi
bindir=$tdir/$(rustc -vV | sed -n 's/^host: //p')/release
# Targets that touch files (tar_unpack makes a directory tree per input) make them under
# TMPDIR: a tmpfs makes them several times quicker. FUZZ_TMPDIR overrides.
tmpdir=${FUZZ_TMPDIR:-/dev/shm}
if [ -d "$tmpdir" ] && [ -w "$tmpdir" ]; then export TMPDIR=$tmpdir; fi

summary=$(mktemp)
found=0
for t in "${targets[@]}"; do
  bin=$bindir/$t
  [ -x "$bin" ] || { echo "no fuzz target $t (fuzz/fuzz_targets/$t.rs)" >&2; exit 2; }
  work=fuzz/work/$t
  art=fuzz/artifacts/$t
  mkdir -p "$work" "$art"
  runs=()
  if [ "$goal" -gt 0 ]; then
    left=$((goal - $(ledger_execs "$t")))
    if [ "$left" -le 0 ]; then
      echo "== $t: the campaign already holds $(ledger_execs "$t") executions (goal $goal): skipped"
      continue
    fi
    runs=(-runs="$left")
  fi
  before=$(find "$art" -type f | wc -l)
  log=$(mktemp)
  echo "== $t: ${secs}s"
  start=$SECONDS
  parallel=()
  [ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
  set +e
  # New inputs go to fuzz/work/<t> (the first directory); the seeds stay as committed.
  "$bin" "$work" "fuzz/corpus/$t" -max_total_time="$secs" -print_final_stats=1 \
    -artifact_prefix="$art/" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    "${runs[@]}" "${parallel[@]}" >"$log" 2>&1
  rc=$?
  set -e
  # With -jobs, each worker logs to fuzz-N.log in the current directory.
  if [ "$jobs" -gt 1 ]; then cat fuzz-*.log >>"$log" 2>/dev/null || true; rm -f fuzz-*.log; fi
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | awk '{print $2}')
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | awk '{print $2}')
  corp=$(find "$work" -type f | wc -l)
  after=$(find "$art" -type f | wc -l)
  findings=$((after - before))
  if [ "$rc" -ne 0 ] && [ "$findings" -eq 0 ]; then
    echo "$t: libFuzzer exited $rc without an artifact:" >&2
    tail -30 "$log" >&2
    findings=1
  fi
  if [ "$findings" -gt 0 ]; then
    found=1
    grep -E 'panicked at|ERROR: libFuzzer|SUMMARY|^Test unit written' "$log" | head -20 || true
  fi
  printf '%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$execs" "$((SECONDS - start))" >>"$ledger"
  total=$(ledger_execs "$t")
  hours=$(awk -F'\t' -v t="$t" '$2 == t {s += $4} END {printf "%.2f", s / 3600}' "$ledger")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$execs" "$((SECONDS - start))" "${cov:-?}" "${ft:-?}" "$corp" "$findings" "$total" "$hours" >>"$summary"
  rm -f "$log"
done

echo
{
  printf 'target\texecutions\tseconds\tcov\tft\tcorpus\tfindings\tcampaign-execs\tcampaign-hours\n'
  cat "$summary"
} | column -t -s $'\t'
rm -f "$summary"
exit "$found"
