#!/usr/bin/env bash
# A tokensel grid as a Slurm job array: one array task per shard, then a merge job.
#
#   sbatch --array=1-64 examples/grid_slurm.sh /shared/out/final 64 --preset heatmap-final
#   sbatch --dependency=afterok:<array job id> --wrap "tokensel grid merge /shared/out/final"
#
# Task K runs shard K of N (1-based, as --array=1-N numbers them) and writes only its
# own DIR/cells/HASH.json files, atomically. Resubmitting the array after a failure or a
# timeout reruns only the missing cells. The merge is byte-identical for any N, and
# `grid merge` exits 1 while cells are missing.
#SBATCH --job-name=tokensel-grid
#SBATCH --cpus-per-task=2
#SBATCH --time=01:00:00
set -euo pipefail
dir=${1:?output directory on a shared file system}
n=${2:?number of shards, equal to the array size}
shift 2
export RAYON_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
${TOKENSEL:-tokensel} grid "$@" --out "$dir" --quiet --shard "${SLURM_ARRAY_TASK_ID:?run under sbatch --array}/${n}"
