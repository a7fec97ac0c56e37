#!/bin/sh
# Slurm Prolog: record this job's GPUs in the DCGM job-mapping directory (a file per NVML GPU index,
# a job id a line) that `trainmon serve --hpc-job-mapping-dir` and dcgm-exporter read.
# slurm.conf: Prolog=/etc/slurm/prolog.d/trainmon.sh (docs/deploy.md, "Slurm job attribution").
#
# slurmd runs it as root on each node of the job, with SLURM_JOB_ID and SLURM_JOB_GPUS (the node's
# GPU indices, as in gres.conf) set. A Prolog that fails drains the node, so every error here is
# reported on stderr and the script still exits 0: monitoring never takes a node out.
dir="${TRAINMON_JOB_MAPPING_DIR:-/var/lib/dcgm-exporter/job-mapping}"
job="${SLURM_JOB_ID:-}"
gpus="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"

if [ -z "$job" ]; then
    echo "trainmon prolog: SLURM_JOB_ID is not set; nothing recorded" >&2
    exit 0
fi
[ -n "$gpus" ] || exit 0
mkdir -p "$dir" && chmod 755 "$dir" || { echo "trainmon prolog: cannot create $dir" >&2; exit 0; }

# Jobs sharing a GPU (gres sharding, OverSubscribe) may start at once: one writer at a time.
exec 9>"$dir/.lock"
command -v flock >/dev/null 2>&1 && flock -w 10 9

indices() {  # "0,2-3" -> "0 2 3"; entries that are not indices (UUIDs) name no mapping file
    old_ifs=$IFS
    IFS=,
    for entry in $1; do
        case "$entry" in
            *[!0-9-]* | '' | -* | *-) ;;
            *-*) seq "${entry%-*}" "${entry#*-}" ;;
            *) echo "$entry" ;;
        esac
    done
    IFS=$old_ifs
}

for gpu in $(indices "$gpus"); do
    file="$dir/$gpu"
    grep -qxF "$job" "$file" 2>/dev/null && continue  # a prolog run again changes nothing
    partial="$dir/.$gpu.$$"
    { grep -vxF "$job" "$file" 2>/dev/null; echo "$job"; } >"$partial" &&
        chmod 644 "$partial" && mv -f "$partial" "$file" ||
        { echo "trainmon prolog: cannot write $file" >&2; rm -f "$partial"; }
done
exit 0
