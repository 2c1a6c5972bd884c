#!/bin/sh
# The size of kiln's state directory for one workspace after N one-iteration `kiln fix` runs
# (issue 34): a git repository of 500 committed files of about 4 KB (2 MB), each run a
# `--replay` answer fixing `t.txt` and a `grep` check; `du -sb` of the workspace's state
# directory (undo records, pre-images, stat cache, edit journal, the store) at the end.
#   sh host/benches/state_size.sh path/to/kiln [N=200]
# Not part of the test suite. Prints: runs, failed runs, bytes, objects (pre-images), records.
set -eu
KILN=$(realpath "$1")
N=${2:-200}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
WS=$TMP/ws
mkdir -p "$WS"
cd "$WS"
i=0
while [ $i -lt 500 ]; do
    d=d$((i / 100))
    mkdir -p $d
    { echo $i; seq 1 700; } > $d/f$i.txt
    i=$((i + 1))
done
printf 'BROKEN\n' > t.txt
git init -q .
git add -A
git -c user.name=b -c user.email=b@b commit -qm init
printf '{"text":"<<<<<<< SEARCH\\nBROKEN\\n=======\\nFIXED\\n>>>>>>> REPLACE\\n"}\n' > "$TMP/replay.jsonl"
sleep 3 # older than a racy stat
run=0
failed=0
while [ $run -lt "$N" ]; do
    printf 'BROKEN\n' > t.txt
    env -i PATH="$PATH" HOME="$TMP" XDG_STATE_HOME="$TMP/state" KILN_CONFIG="$TMP/none.toml" \
        KILN_YES=1 KILN_NO_WARMER=1 \
        "$KILN" fix --cmd 'grep -q FIXED t.txt' --file t.txt --max-iters 1 \
        --replay "$TMP/replay.jsonl" > /dev/null 2>&1 || failed=$((failed + 1))
    run=$((run + 1))
done
STATE=$(echo "$TMP"/state/kiln/workspaces/*)
echo "runs $N failed $failed bytes $(du -sb "$STATE" | cut -f1) objects $(ls "$STATE/undo/objects" | wc -l) records $(ls "$STATE/undo/runs" | grep -c '^[0-9]*\.json$')"
