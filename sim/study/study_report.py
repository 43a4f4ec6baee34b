# A study's report from its CSV (`hetsim sweep` writes both): PNG plots (throughput against GPU
# count, the time split of each run, cost against throughput with the Pareto front) and one HTML
# page with the table of runs, the plots, and per run its time split and memory.
# Usage: python3 study_report.py STUDY.csv OUT_PREFIX   (writes OUT_PREFIX.html, OUT_PREFIX.*.png)
# Embedded in hetsim (sim/config/embedded_data.h) and piped to python3 by `hetsim sweep`.
import csv
import html
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

# No timestamps or versions in the PNGs, so the same CSV gives the same files.
PNG_META = {"Software": None}


def number(row, key):
    v = row.get(key, "")
    return float(v) if v not in ("", None) else None


def run_label(r):
    parts = [r["cluster"], r["plan"]]
    if r.get("framework"):
        parts.append(r["framework"])
    if r.get("perturbation") and r["perturbation"] != "none":
        parts.append(r["perturbation"])
    return " | ".join(parts)


def plot_throughput(rows, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for model in sorted({r["model"] for r in rows}):
        pts = sorted((int(r["gpus"]), number(r, "tokens_per_s")) for r in rows if r["model"] == model)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", label=model)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("throughput (tokens/s)")
    ax.set_title("Throughput against GPU count")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata=PNG_META)
    plt.close(fig)


def plot_time_split(rows, path, limit=60):
    shown = rows[:limit]
    labels = [f'{r["index"]}: {r["model"]} | {run_label(r)}' for r in shown]
    parts = [("compute_s", "compute", "#4c72b0"),
             ("communication_exposed_s", "exposed communication", "#dd8452"),
             ("bubble_s", "pipeline bubble", "#55a868")]
    fig, ax = plt.subplots(figsize=(9, 1.5 + 0.3 * len(shown)))
    left = [0.0] * len(shown)
    for key, name, colour in parts:
        ms = [1e3 * (number(r, key) or 0) for r in shown]
        ax.barh(range(len(shown)), ms, left=left, label=name, color=colour)
        left = [a + b for a, b in zip(left, ms)]
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms per iteration (mean over devices)")
    title = "Time split per run"
    if len(rows) > limit:
        title += f" (first {limit} of {len(rows)})"
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, metadata=PNG_META)
    plt.close(fig)


def plot_cost(rows, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    priced = [r for r in rows if number(r, "cost_per_million_tokens_usd") is not None]
    for model in sorted({r["model"] for r in priced}):
        mine = [r for r in priced if r["model"] == model]
        ax.plot([number(r, "tokens_per_s") for r in mine],
                [number(r, "cost_per_million_tokens_usd") for r in mine], "o", alpha=0.6, label=model)
        front = sorted((number(r, "tokens_per_s"), number(r, "cost_per_million_tokens_usd"))
                       for r in mine if r.get("pareto") == "true")
        if front:
            ax.plot([p[0] for p in front], [p[1] for p in front], "k-", linewidth=1)
            ax.plot([p[0] for p in front], [p[1] for p in front], "k*", markersize=9)
    ax.set_xlabel("throughput (tokens/s)")
    ax.set_ylabel("dollars per million tokens")
    ax.set_title("Cost against throughput (stars: Pareto front)")
    ax.grid(True, alpha=0.3)
    if priced:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata=PNG_META)
    plt.close(fig)


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def write_html(all_rows, ok, pngs, path, title):
    e = html.escape
    cols = ["#", "model", "cluster", "plan", "framework", "perturbation", "status", "GPUs",
            "iteration (ms)", "tokens/s", "MFU", "compute (ms)", "exposed comm. (ms)",
            "bubble (ms)", "peak memory (GiB)", "OOM", "$/iteration", "$/M tokens", "$/run",
            "Pareto", "error"]
    out = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
           f"<title>{e(title)}</title>",
           "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;"
           "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
           "td.t{text-align:left}tr.failed{color:#a00}tr.pareto{background:#eef8ee}"
           "img{max-width:100%;margin:1em 0}</style></head><body>",
           f"<h1>{e(title)}</h1>",
           f"<p>{len(all_rows)} runs, {len(ok)} ok, {len(all_rows) - len(ok)} failed. "
           "Time split: mean over devices of one iteration. Memory: the fullest GPU's peak. "
           "Pareto: no run of the same model and perturbation is both faster and cheaper.</p>",
           "<table id=\"runs\"><thead><tr>" + "".join(f"<th>{c}</th>" for c in cols) +
           "</tr></thead><tbody>"]
    for r in all_rows:
        good = r["status"] == "ok"
        cls = "failed" if not good else ("pareto" if r.get("pareto") == "true" else "")
        cells = [(r["index"], ""), (r["model"], "t"), (r["cluster"], "t"), (r["plan"], "t"),
                 (r["framework"], "t"), (r.get("perturbation", ""), "t"), (r["status"], "t")]
        if good:
            n = lambda k: number(r, k)  # noqa: E731
            mem = n("peak_memory_bytes")
            cells += [(r["gpus"], ""), (fmt(1e3 * n("iteration_time_s"), ".2f"), ""),
                      (fmt(n("tokens_per_s"), ".0f"), ""), (fmt(100 * n("mfu"), ".1f") + "%", ""),
                      (fmt(1e3 * n("compute_s"), ".2f"), ""),
                      (fmt(1e3 * n("communication_exposed_s"), ".2f"), ""),
                      (fmt(1e3 * n("bubble_s"), ".2f"), ""),
                      (fmt(mem / 2**30 if mem is not None else None, ".2f"), ""),
                      ("yes" if r["oom"] == "true" else "", ""),
                      (fmt(n("cost_per_iteration_usd"), ".5f"), ""),
                      (fmt(n("cost_per_million_tokens_usd"), ".4f"), ""),
                      (fmt(n("cost_per_run_usd"), ",.0f"), ""),
                      ("yes" if r.get("pareto") == "true" else "", "")]
        else:
            cells += [("", "")] * 13
        cells.append((r["error"], "t"))
        out.append(f"<tr class=\"{cls}\">" + "".join(
            f"<td class=\"{c}\">{e(str(v))}</td>" if c else f"<td>{e(str(v))}</td>"
            for v, c in cells) + "</tr>")
    out.append("</tbody></table>")
    for name, alt in pngs:
        out.append(f"<h2>{e(alt)}</h2><img src=\"{e(name)}\" alt=\"{e(alt)}\">")
    out.append("</body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: study_report.py STUDY.csv OUT_PREFIX")
    csv_path, prefix = sys.argv[1], sys.argv[2]
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    ok = [r for r in rows if r["status"] == "ok"]
    base = os.path.basename(prefix)
    pngs = []
    if ok:
        for suffix, alt, plot in (("throughput", "Throughput against GPU count", plot_throughput),
                                  ("time_split", "Time split per run", plot_time_split),
                                  ("cost", "Cost against throughput", plot_cost)):
            plot(ok, f"{prefix}.{suffix}.png")
            pngs.append((f"{base}.{suffix}.png", alt))
    write_html(rows, ok, pngs, prefix + ".html", "Study " + os.path.basename(csv_path))


if __name__ == "__main__":
    main()
