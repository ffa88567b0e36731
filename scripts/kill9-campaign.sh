#!/bin/sh
# The long form of the state tests' `kill -9` campaigns (issue "state that outlives a
# sandbox"): the server killed at 20 moments (random ones printed with their seed) of each of a
# snapshot, a pause to disk, a fork and a volume write, then restarted; after each, nothing
# partial is left and every complete object works. CI runs the same tests with 6 rounds.
# Then the slow hostile input CI leaves out: a snapshot of a million and one files.
#
#   scripts/kill9-campaign.sh [ROUNDS]        # default 20; CORDON_KILL9_SEED=N replays one
set -eu
cd "$(dirname "$0")/.."
export CORDON_KILL9_ROUNDS="${1:-20}"
echo "kill -9 campaigns: $CORDON_KILL9_ROUNDS rounds each"
cargo test -p cordon --test state -- --test-threads 1 --nocapture \
    cut_by_kill_9 killed_keeps_every_whole_file
# And the slow hostile tree: a million and one files against the snapshot's entry limit.
exec cargo test -p cordon --test state -- --ignored --nocapture million
