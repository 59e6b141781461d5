# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Plot output throughput and p99 TTFT from a load test (runs on the controller).

Usage: plot_loadtest.py DATA.json OUT.png
DATA.json is the output of the `llmops.serving.loadtest_plot_data` filter:
{"title": str, "x_label": str, "series": [{"label": str, "points": [{"x", "output_throughput", "ttft_p99_ms"}]}]}
Needs matplotlib (the controller's tools venv has it). Exit 2 when it is missing.
"""
import json
import sys


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 64
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.stderr.write("matplotlib is not importable by %s (%s): install it into the controller's "
                         "Python or set verify_plot_python / verify_plot: false\n" % (sys.executable, e))
        return 2
    with open(argv[0], "r", encoding="utf-8") as f:
        data = json.load(f)
    xs = []
    for s in data["series"]:
        for p in s["points"]:
            if str(p["x"]) not in xs:
                xs.append(str(p["x"]))
    pos = dict((x, i) for i, x in enumerate(xs))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for s in data["series"]:
        for ax, key in ((ax1, "output_throughput"), (ax2, "ttft_p99_ms")):
            pts = [(pos[str(p["x"])], p[key]) for p in s["points"] if p.get(key) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s["label"])
    for ax, ylabel in ((ax1, "output tokens/s"), (ax2, "p99 TTFT (ms)")):
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels(xs)
        ax.set_xlabel(data.get("x_label", "x"))
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        if len(data["series"]) > 1:
            ax.legend(fontsize="small")
    ax1.set_title("Output throughput")
    ax2.set_title("p99 time to first token")
    fig.suptitle(data.get("title", ""))
    fig.tight_layout()
    fig.savefig(argv[1], dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
