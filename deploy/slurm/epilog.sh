#!/bin/sh
# Slurm Epilog: remove this job from the DCGM job-mapping directory the prolog wrote, and each
# GPU's file once no job is left on it.
# slurm.conf: Epilog=/etc/slurm/epilog.d/trainmon.sh (docs/deploy.md, "Slurm job attribution").
#
# Every mapping file is searched, not only SLURM_JOB_GPUS, so a job whose GPU list is unknown here
# still leaves none behind. Like the prolog it always exits 0 (a failing Epilog drains the node).
dir="${TRAINMON_JOB_MAPPING_DIR:-/var/lib/dcgm-exporter/job-mapping}"
job="${SLURM_JOB_ID:-}"

[ -n "$job" ] && [ -d "$dir" ] || exit 0
exec 9>"$dir/.lock"
command -v flock >/dev/null 2>&1 && flock -w 10 9

for file in "$dir"/*; do
    case "${file##*/}" in
        *[!0-9.]* | .* | '*') continue ;;
    esac
    [ -f "$file" ] && grep -qxF "$job" "$file" || continue
    partial="$dir/.${file##*/}.$$"
    if grep -vxF "$job" "$file" >"$partial"; then
        chmod 644 "$partial" && mv -f "$partial" "$file"
    else
        rm -f "$partial" "$file"  # no other job on this GPU
    fi
done
exit 0
