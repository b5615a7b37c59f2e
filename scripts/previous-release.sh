#!/usr/bin/env bash
# Builds the balancer of an earlier release, for a rolling-upgrade test
# (tests/common/process.rs, `BalancerProcess::start_binary`): the commit
# PREVIOUS_RELEASE of this repository's history, taken out with `git
# archive` and built in a target directory of its own (sharing ours would
# overwrite target/debug/nodes-control). Cached: a second run only prints
# the path. Prints the binary's path.
#
# A rolling upgrade is tested only between releases of one storage layout
# (CHANGELOG.md): 0.1.0 is the first release, so there is none to test yet.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${PREVIOUS_RELEASE:?set PREVIOUS_RELEASE to the commit of a release with this storage layout}
out="$PWD/target/previous-release/$commit"
if [ ! -x "$out/nodes-control" ]; then
    if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "commit $commit is not in this clone's history (a shallow clone?): git fetch --unshallow" >&2
        exit 1
    fi
    rm -rf "$out/src"
    mkdir -p "$out/src"
    git archive "$commit" | tar -x -C "$out/src"
    echo "building the previous release ($commit) for the rolling-upgrade test..." >&2
    CARGO_TARGET_DIR="$PWD/target/previous-release/target" \
        cargo build --quiet --locked --manifest-path "$out/src/Cargo.toml" --bin nodes-control >&2
    cp "$PWD/target/previous-release/target/debug/nodes-control" "$out/nodes-control"
fi
echo "$out/nodes-control"
