"""CPU use of this machine during `make test`, to see where CI's minutes go.

usage: python3 scripts/cpu-sampler.py run OUT.tsv [INTERVAL]    sample until killed: "epoch busy% load1 runnable"
       python3 scripts/cpu-sampler.py summary OUT.tsv [STAGES.tsv]
The summary prints the whole run's mean busy share and how much of it was saturated
(>= 90 % busy), then, given scripts/test.sh's stage windows (name, start, end), the same
per stage. Busy is 1 - (idle + iowait) / total from /proc/stat, over all cores.
"""
import sys
import time


def cpu_times():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields), idle


def runnable():
    with open("/proc/loadavg") as f:
        parts = f.read().split()
    return float(parts[0]), int(parts[3].split("/")[0])


def run(out, interval):
    total0, idle0 = cpu_times()
    while True:
        time.sleep(interval)
        total1, idle1 = cpu_times()
        busy = 100.0 * (1 - (idle1 - idle0) / float(max(1, total1 - total0)))
        total0, idle0 = total1, idle1
        load1, running = runnable()
        with open(out, "a") as f:
            f.write("%d\t%.1f\t%.2f\t%d\n" % (time.time(), busy, load1, running))


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                rows.append((float(parts[0]), float(parts[1])))
    return rows


def describe(rows):
    if not rows:
        return "no samples"
    busy = [row[1] for row in rows]
    return "busy %.0f %% on average, saturated (>= 90 %%) %.0f %% of the time (%d samples)" % (
        sum(busy) / len(busy), 100.0 * sum(1 for b in busy if b >= 90) / len(busy), len(busy))


def summary(path, stages=None):
    rows = read(path)
    print("cpu: whole run: %s" % describe(rows))
    if not stages:
        return
    with open(stages) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            name, lo, hi = parts[0], float(parts[1]), float(parts[2])
            print("cpu: %-16s %5d s: %s" % (name, hi - lo, describe([r for r in rows if lo <= r[0] <= hi])))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        run(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 10.0)
    elif len(sys.argv) >= 3 and sys.argv[1] == "summary":
        summary(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    else:
        sys.exit(__doc__)
