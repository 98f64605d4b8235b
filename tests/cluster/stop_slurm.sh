#!/usr/bin/env bash
# Stop the cluster started by start_slurm.sh: cancel leftover jobs, then signal the daemons by the
# PIDs the start script recorded (checking each PID still runs the expected program), and remove
# the /etc/slurm/slurm.conf link if it is ours. Nothing is stopped by name.
set -uo pipefail

BASE=${LALM_SLURM_BASE:-${TMPDIR:-/tmp}/lalm-judge-slurm}
RUN=$BASE/run
CONF=$BASE/etc/slurm.conf

running() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$state" ] && [ "$state" != Z ]
}

# stop <pid file> <program name>: TERM, then KILL after 10 s.
stop() {
    local pid_file=$1 program=$2 pid
    [ -s "$pid_file" ] || { rm -f "$pid_file"; return 0; }
    pid=$(cat "$pid_file")
    if running "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$program" ]; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
        if running "$pid"; then
            echo "[stop_slurm] $program ($pid) still runs 10 s after TERM; sending KILL"
            kill -KILL "$pid" 2>/dev/null
        fi
        echo "[stop_slurm] stopped $program (pid $pid)"
    elif running "$pid"; then
        echo "[stop_slurm] pid $pid of $pid_file now runs '$(cat "/proc/$pid/comm")', not $program: left alone"
    fi
    rm -f "$pid_file"
}

if [ -s "$RUN/slurmctld.pid" ] && running "$(cat "$RUN/slurmctld.pid")"; then
    jobs=$(SLURM_CONF=$CONF timeout 10 squeue -h -t PD,R,CG,S -o '%i' 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        echo "[stop_slurm] cancelling jobs $jobs"
        # shellcheck disable=SC2086  # one argument per job id
        SLURM_CONF=$CONF timeout 10 scancel $jobs 2>/dev/null
        for _ in $(seq 50); do
            [ -z "$(SLURM_CONF=$CONF timeout 5 squeue -h -t PD,R,CG,S -o '%i' 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
fi

stop "$RUN/slurmd.pid" slurmd
stop "$RUN/slurmctld.pid" slurmctld
stop "$RUN/munged.pid" munged
rm -f "$RUN"/*.daemon.pid "$BASE/munge/munged.pid"

if [ -L /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" = "$CONF" ]; then
    rm -f /etc/slurm/slurm.conf
fi
echo "[stop_slurm] done"
