#!/usr/bin/env bash
# Run a tokensel grid as N shards with GNU parallel, then merge.
#
#   examples/grid_parallel.sh DIR N GRID-ARGS...
#   examples/grid_parallel.sh out/final 8 --preset heatmap-final
#   examples/grid_parallel.sh out/mine 4 --grid my-grid.toml --seeds 0..5
#
# Local cores: N jobs at once on this machine. Several machines: add
#   --sshlogin 8/host1,8/host2 --workdir .
# to the `parallel` line; DIR must then be on a shared file system (each shard writes
# only its own DIR/cells/HASH.json files, atomically, so shards never collide). An
# interrupted run resumes: run the same command again, finished cells are skipped.
# The merge is byte-identical for every N. TOKENSEL names the binary (default:
# `tokensel` on PATH, e.g. after `cargo install --path .`).
set -euo pipefail
dir=${1:?output directory}
n=${2:?number of shards}
shift 2
tokensel=${TOKENSEL:-tokensel}
# each shard runs its cells one at a time (RAYON_NUM_THREADS=1): N shards fill N cores
RAYON_NUM_THREADS=1 parallel --will-cite --halt now,fail=1 -j "$n" \
    "$tokensel" grid "$@" --out "$dir" --quiet --shard {}/"$n" ::: $(seq 1 "$n")
"$tokensel" grid merge "$dir"
