# Sourced by bench/concurrency.sh and bench/fan_out.sh: `portion run` timed on
# a fresh store, and the median of REPS such runs. Needs $work (holding
# portion.yaml) and $REPS.

# once BIN: one run on a fresh store; prints "wall user+sys calls code".
# (the last run's pages are moved aside, not deleted, until the script
# ends: ext4 without a journal, as on this VM's disk, skips every inode
# freed in the last minute (six while its block is dirty) when it makes a
# file, reading each one, so a run just after deleting 6,400 pages spent
# 0.4 ms more kernel CPU a page: perf, __ext4_new_inode -> find_inode_bit ->
# recently_deleted; BENCHMARKS.md, "What to know before measuring")
once() {
    [ ! -e "$work/out" ] || mv "$work/out" "$work/set-aside.$(date +%s%N)"
    rm -rf "$work"/ledger.db*
    local code=0
    /usr/bin/time -f '%e %U %S' -o "$work/time" \
        "$1" --config "$work/portion.yaml" run > /dev/null 2> "$work/err" || code=$?
    local made
    made=$(sed -n 's/.*; \([0-9]*\) calls.*/\1/p' "$work/err" | tail -1)
    # (the last line: a failed command's status line comes first)
    read -r wall user sys < <(tail -1 "$work/time")
    echo "$wall $(echo "$user + $sys" | bc) ${made:-0} $code"
}

# median_run BIN: of REPS runs, the one of median wall time, as `once`
# prints it.
median_run() {
    local runs=()
    for _ in $(seq "$REPS"); do runs+=("$(once "$1")"); done
    printf '%s\n' "${runs[@]}" | sort -n | sed -n "$(((REPS + 1) / 2))p"
}
