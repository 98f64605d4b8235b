#!/usr/bin/env bash
# Start a throw-away single-node SLURM cluster on localhost (munged, slurmctld, slurmd) for the
# cluster test. Runs as root; no cgroups, no accounting database (Snakemake then polls `squeue`).
# The node advertises two stand-in GPUs (GRES backed by character devices that behave like /dev/null)
# so that GPU requests of judge jobs (`--gpus`, `--cpus-per-gpu`) are scheduled for real and SLURM
# sets CUDA_VISIBLE_DEVICES; nothing runs on them. Where mknod is not allowed, the node has no GPUs
# ($LALM_SLURM_BASE/etc/gpu_count says which).
#
# Two settings are mandatory for snakemake-executor-plugin-slurm:
#   1. /etc/slurm/slurm.conf links to our slurm.conf: the plugin's job step drops every SLURM_*
#      variable (SLURM_CONF too) before its inner `srun`, so only the compiled-in path is read.
#   2. MinJobAge >= 3 x --slurm-init-seconds-before-status-checks: without slurmdbd, job states come
#      from `squeue`, which must still list a job when its first status check happens. The test cluster keeps
#      finished jobs for a day, far longer than any test run on a loaded machine: Snakemake and the test read
#      every job's final state from squeue after the run (SLURM's default, 300 s, is shorter than a slow run).
#
# State, logs and PID files live under $LALM_SLURM_BASE (default ${TMPDIR:-/tmp}/lalm-judge-slurm);
# stop_slurm.sh stops exactly the recorded PIDs. Re-running while the cluster is healthy is a no-op.
# Exit status 2 means "cannot run here" (not root, no apt-get); the test skips on it.
set -euo pipefail

BASE=${LALM_SLURM_BASE:-${TMPDIR:-/tmp}/lalm-judge-slurm}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONF=$BASE/etc/slurm.conf
RUN=$BASE/run
LOG=$BASE/log
MUNGE_DIR=$BASE/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket.2
NODE=$(hostname -s 2>/dev/null || echo localhost)
PACKAGES=(munge slurmctld slurmd slurm-client)
STAND_IN_GPUS=2

log() { echo "[start_slurm] $*"; }
cannot_run() { log "cannot run here: $*"; exit 2; }
fail() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || cannot_run "needs root (it installs Debian packages and runs slurmd as root)"

# A PID file names a live process (zombies count as dead: some sandboxes reap late).
alive() {
    [ -s "$1" ] || return 1
    local state
    state=$(awk '{print $3}' "/proc/$(cat "$1")/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

if alive "$RUN/munged.pid" && alive "$RUN/slurmctld.pid" && alive "$RUN/slurmd.pid" \
    && [ "$(readlink -f /etc/slurm/slurm.conf 2>/dev/null)" = "$(readlink -f "$CONF")" ] \
    && timeout 10 sinfo -h -n "$NODE" -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    log "already running (node $NODE, state under $BASE)"
    exit 0
fi
if compgen -G "$RUN/*.pid" >/dev/null; then
    log "stopping the half-started cluster of an earlier run"
    bash "$HERE/stop_slurm.sh" || true
fi

if (exec 3<>/dev/tcp/127.0.0.1/6817) 2>/dev/null; then
    fail "port 6817 is taken: another slurmctld runs (/etc/slurm/slurm.conf -> $(readlink -f /etc/slurm/slurm.conf)); stop that cluster first"
fi

missing=()
for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || cannot_run "packages ${missing[*]} are missing and there is no apt-get"
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || cannot_run "apt-get update failed (no package mirror reachable?)"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || cannot_run "apt-get install ${missing[*]} failed"
fi

mkdir -p "$BASE/etc" "$RUN" "$LOG" "$MUNGE_DIR"
rm -rf "$BASE/spool" && mkdir -p "$BASE/spool/ctld" "$BASE/spool/d"   # fresh queue every start
chown munge:munge "$MUNGE_DIR" && chmod 0755 "$MUNGE_DIR"              # the socket's folder needs o+x
[ -s "$MUNGE_DIR/munge.key" ] || runuser -u munge -- mungekey --create --keyfile="$MUNGE_DIR/munge.key"
chown munge:munge "$MUNGE_DIR/munge.key" && chmod 0600 "$MUNGE_DIR/munge.key"

# Stand-in GPU devices: slurmd needs character devices and hands out their indexes.
rm -f "$BASE"/etc/gpu[0-9]*
for i in $(seq 0 $((STAND_IN_GPUS - 1))); do
    mknod "$BASE/etc/gpu$i" c 1 3 2>/dev/null || { STAND_IN_GPUS=0; break; }
done
echo "$STAND_IN_GPUS" >"$BASE/etc/gpu_count"
if [ "$STAND_IN_GPUS" -gt 0 ]; then
    NODE_GRES="Gres=gpu:$STAND_IN_GPUS "
    printf 'AutoDetect=off\nNodeName=%s Name=gpu File=%s/etc/gpu[0-%d]\n' "$NODE" "$BASE" $((STAND_IN_GPUS - 1)) >"$BASE/etc/gres.conf"
else
    NODE_GRES=""
    rm -f "$BASE/etc/gres.conf"
fi

# The node's CPU layout as slurmd detects it (a mismatch would drain the node); 80 % of RAM.
HARDWARE=$(slurmd -C | head -1)
CPUS=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$HARDWARE")
TOPOLOGY=$(grep -oE '(Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' <<<"$HARDWARE" | tr '\n' ' ')
MEMORY_MB=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)

cat > "$CONF" <<CONF
# Written by tests/cluster/start_slurm.sh: one node, no cgroups, no accounting database.
ClusterName=lalmjudge
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$BASE/spool/ctld
SlurmdSpoolDir=$BASE/spool/d
SlurmctldPidFile=$RUN/slurmctld.daemon.pid
SlurmdPidFile=$RUN/slurmd.daemon.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
# Finished jobs stay in squeue this long (a day: longer than any test run, however loaded the machine);
# Snakemake and the test read their final state from there.
MinJobAge=86400
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS ${TOPOLOGY}RealMemory=$MEMORY_MB ${NODE_GRES}State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF

mkdir -p /etc/slurm
if [ -e /etc/slurm/slurm.conf ] && [ ! -L /etc/slurm/slurm.conf ]; then
    mv /etc/slurm/slurm.conf "/etc/slurm/slurm.conf.before-lalm-judge.$(date +%s)"
fi
ln -sfn "$CONF" /etc/slurm/slurm.conf
export SLURM_CONF=$CONF

# Each daemon runs in the foreground of its own session; its PID is what stop_slurm.sh signals.
log "starting munged"
setsid setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --foreground \
    --key-file="$MUNGE_DIR/munge.key" --socket="$MUNGE_SOCKET" --pid-file="$MUNGE_DIR/munged.pid" \
    --seed-file="$MUNGE_DIR/munged.seed" >"$LOG/munged.log" 2>&1 </dev/null &
echo $! >"$RUN/munged.pid"
for _ in $(seq 50); do munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 && break; sleep 0.1; done
munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET" >/dev/null || fail "munged does not answer; see $LOG/munged.log"

log "starting slurmctld"
setsid /usr/sbin/slurmctld -D -i -f "$CONF" >"$LOG/slurmctld.out" 2>&1 </dev/null &
echo $! >"$RUN/slurmctld.pid"
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.2; done
scontrol ping | grep -q 'is UP' || fail "slurmctld is not up; see $LOG/slurmctld.log"

log "starting slurmd"
setsid /usr/sbin/slurmd -D -f "$CONF" -N "$NODE" >"$LOG/slurmd.out" 2>&1 </dev/null &
echo $! >"$RUN/slurmd.pid"
state=""
for _ in $(seq 150); do
    state=$(sinfo -h -n "$NODE" -o '%T' 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.2
done
if [ "$state" != idle ]; then
    scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true
    sleep 1
    state=$(sinfo -h -n "$NODE" -o '%T' || true)
fi
[ "$state" = idle ] || fail "node $NODE is '$state', not idle; see $LOG/slurmd.log"

timeout 30 srun -N1 -n1 -t 1 true || fail "a test job (srun true) failed; see $LOG/slurmctld.log"
log "up: node $NODE, $CPUS CPUs, ${MEMORY_MB} MB, $STAND_IN_GPUS stand-in GPUs, partition debug"
