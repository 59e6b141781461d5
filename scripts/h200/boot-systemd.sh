#!/usr/bin/env bash
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
#
# On the lent H200 machine (no systemd: PID 1 is the VM's agent): boot Debian
# bookworm's systemd 252 as PID 1 of a new PID + mount + cgroup + UTS namespace,
# so that the collection's units run as on any host. Every command that must see
# that systemd runs through `nsenter -t "$(cat /var/lib/llmops-h200/systemd.pid)" -a CMD`
# (systemctl, journalctl, ansible-playbook -c local). Re-runnable: an already
# booted systemd is reused.
#   boot-systemd.sh DEBS_DIR     # the .debs of stage.sh (p5/debs)
# Prints "systemd pid: N; state: running" (about 6 s after the start).
set -u
debs=${1:?usage: boot-systemd.sh DEBS_DIR}
# Not under /tmp: the booted systemd's tmpfiles (tmp.conf `D /tmp`) empty /tmp
# at boot, on the machine's one file system (seen on the H200: the staged parts
# and ansible-core in /tmp were gone after the first boot).
BASE=/var/lib/llmops-h200
PIDFILE=$BASE/systemd.pid
CG=/sys/fs/cgroup/llmops-sd
mkdir -p "$BASE"

state() { nsenter -t "$1" -a systemctl is-system-running 2>&1; }

if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "systemd pid: $(cat "$PIDFILE"); state: $(state "$(cat "$PIDFILE")") (already booted)"; exit 0
fi
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || { echo "needs a cgroup2 /sys/fs/cgroup"; exit 2; }
t0=$(date +%s.%N)
mkdir -p $BASE/sd-root
for d in "$debs"/*.deb; do dpkg -x "$d" $BASE/sd-root; done
# Only files the image lacks: never replace the image's own (keep /lib -> usr/lib).
tar -C $BASE/sd-root -cf - . | tar -C / --skip-old-files --keep-directory-symlink -xf -
ldconfig
if ldd /lib/systemd/systemd | grep -q "not found"; then
  ldd /lib/systemd/systemd | grep "not found"; exit 3
fi
mkdir -p "$CG"
echo "+cpu +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
cat > $BASE/boot-inner.sh <<'B'
#!/bin/bash
echo $$ > /sys/fs/cgroup/llmops-sd/cgroup.procs
exec unshare --pid --fork --mount --cgroup --uts --propagation private bash -c \
  'umount /sys/fs/cgroup; mount -t cgroup2 cgroup2 /sys/fs/cgroup; mount -t proc proc /proc;
   exec env -i container=other PATH=/usr/sbin:/usr/bin:/sbin:/bin /lib/systemd/systemd --system' \
  > /var/lib/llmops-h200/systemd-boot.log 2>&1
B
chmod +x $BASE/boot-inner.sh
setsid $BASE/boot-inner.sh </dev/null >/dev/null 2>&1 &
pid=""
for _ in $(seq 60); do
  pid=$(head -1 "$CG/init.scope/cgroup.procs" 2>/dev/null)
  if [ -n "$pid" ] && state "$pid" | grep -qE '^(running|degraded)$'; then break; fi
  sleep 0.5
done
[ -n "$pid" ] || { echo "systemd did not start:"; tail -20 $BASE/systemd-boot.log; exit 4; }
echo "$pid" > "$PIDFILE"
echo "systemd pid: $pid; state: $(state "$pid"); boot $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
