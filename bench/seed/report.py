#!/usr/bin/python3
"""Tables and plots of the seed benchmark, from what bench/seed/run.py
gathered.  Run on its own to redraw them from a saved run:

    report.py bench/work/seed/seed.json [--results bench/results] [--no-plots]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

LABELS = {"memory": "in memory, no storage (harness alone)",
          "h5": "PyTorch + h5py, direct", "files": "PyTorch, file per sample, direct",
          "larder": "larder"}
DIRECT = ("h5", "files")


def percentile(ordered, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not ordered:
        return 0.0
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def rows(results, compute_s):
    """One row per (reader, epoch) with the figures of the table."""
    out = []
    for result in results:
        config = result["config"]
        for e in result["epochs"]:
            waits = sorted(e["waits"])
            n = len(waits)
            if config == "larder":
                label = f"larder epoch {e['epoch']}" + (" (cold)" if e["epoch"] == 1 else " (warm)")
            else:
                label = LABELS[config] + (f", epoch {e['epoch']}" if len(result["epochs"]) > 1
                                          else "")
            if n < e.get("epoch_steps", n):
                label += f" (first {n} of {e['epoch_steps']} steps)"
            before, after = e.get("slowfs_before"), e.get("slowfs_after")
            reads = nbytes = meta = None
            if before and after:
                reads = after["reads"] - before["reads"]
                nbytes = after["bytes"] - before["bytes"]
                meta = after["meta_ops"] - before["meta_ops"]
            out.append({
                "config": config, "epoch": e["epoch"], "label": label, "steps": n,
                "epoch_steps": e.get("epoch_steps", n), "waits": e["waits"],
                "mean": sum(waits) / n if n else 0.0,
                "p50": percentile(waits, 0.5), "p95": percentile(waits, 0.95),
                "p99": percentile(waits, 0.99), "max": waits[-1] if n else 0.0,
                "first": e["waits"][0] if n else 0.0,
                "over": sum(1 for w in waits if w > compute_s),
                "over_1s": sum(1 for w in waits if w > 1.0),
                "wall": e["wall_s"], "compute": e["compute_s"],
                "au": e["compute_s"] / e["wall_s"] if e["wall_s"] else 0.0,
                "reads": reads, "bytes": nbytes, "meta": meta,
                "reader_waits": e.get("reader_waits"),
            })
    return out


def tree_state(where=None):
    """The checkout's commit and whether it has uncommitted changes:
    {"commit": short hash or "?", "dirty": bool, "changes": first lines of
    git status}.  run.py records it when the run starts and ends."""
    where = where or os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=where).stdout.strip() or "?"
        status = subprocess.run(["git", "status", "--porcelain"], capture_output=True,
                                text=True, cwd=where).stdout.splitlines()
    except OSError:
        return {"commit": "?", "dirty": True, "changes": ["git did not run"]}
    return {"commit": commit, "dirty": bool(status), "changes": status[:10]}


def page_reporting():
    """Whether this machine's memory balloon reports free pages to its host
    (virtio_balloon's feature bit 5), which makes each page a run allocates
    cost a host fault once it has been free a few seconds (bench/README.md);
    the same phrase as bench/lib.sh's bench_page_reporting."""
    import glob
    for features in glob.glob("/sys/bus/virtio/drivers/virtio_balloon/virtio*/features"):
        try:
            with open(features) as f:
                bits = f.read().strip()
        except OSError:
            continue
        if len(bits) > 5 and bits[5] == "1":
            return "free page reporting on (virtio_balloon)"
    return "no free page reporting"


def machine_text(meta):
    """The machine's line in a results header: its cores and, where the run
    recorded it, whether free page reporting was on."""
    text = f"{meta['cores']} cores"
    if meta.get("page_reporting"):
        text += f"; {meta['page_reporting']} (bench/README.md)"
    return text


def commit_text(meta):
    """What the results may say about the code they measured.  A dirty tree
    measured no commit, so none is claimed."""
    tree = meta.get("tree")
    if tree is None:  # a run from before run.py recorded its tree
        now = tree_state()
        return (f"commit not recorded by the run (redrawn at {now['commit']}"
                f"{', dirty' if now['dirty'] else ''})")
    if tree["dirty"]:
        return (f"no commit: the tree at {tree['commit']} had uncommitted changes (dirty), "
                f"so these figures are not {tree['commit']}'s; rerun from a clean checkout")
    return f"commit {tree['commit']}"


def slowfs_params(results):
    """The emulator's parameters as slowfs itself reported them over the
    run ({"profile", "seed", "params"}), or None when not recorded;
    raises ValueError when the readers ran on different ones."""
    seen = []
    for result in results:
        reported = result.get("slowfs")
        if reported is None:  # older runs: the counters' snapshots carry them
            reported = next((e.get("slowfs_before") for e in result["epochs"]
                             if e.get("slowfs_before")), None)
        if reported and "params" in reported:
            seen.append({k: reported.get(k) for k in ("profile", "seed", "params")})
    if not seen:
        return None
    if any(other != seen[0] for other in seen[1:]):
        raise ValueError("the readers ran on different slowfs parameters")
    return seen[0]


def describe_profile(params):
    """The emulator's model in words, from its actual parameters."""
    p = params
    parts = [f"a lognormal body (a {p['floor_ms']:g} ms floor plus a {p['latency_ms']:g} ms "
             f"median, sigma {p['sigma']:g})"]
    if p["tail_prob"] > 0:
        cap = (f"up to {p['tail_max_ms'] / 1000:g} s" if p["tail_max_ms"] > 0 else "uncapped")
        parts.append(f"Pareto stalls on {100 * p['tail_prob']:g}% of reads, from "
                     f"{p['tail_scale_ms']:g} ms, {cap} (alpha {p['tail_alpha']:g})")
    else:
        parts.append("no stalls")
    if p["congestion_every_s"] > 0:
        parts.append(f"congestion episodes every {p['congestion_every_s']:g} s for "
                     f"{p['congestion_for_s']:g} s (reads x{p['congestion_factor']:g})")
    else:
        parts.append("no congestion episodes")
    if p["max_concurrent"]:
        parts.append(f"at most {p['max_concurrent']} reads served at once, FIFO")
    else:
        parts.append("no cap on reads served at once")
    parts.append(f"{p['bandwidth_mbps']:g} MB/s shared" if p["bandwidth_mbps"]
                 else "unlimited bandwidth")
    parts.append(f"{p['meta_latency_ms']:g} ms per metadata operation")
    return ", ".join(parts) + "; no page cache"


def ms(seconds):
    v = 1000 * seconds
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def pct(part, whole):
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def table(rs, compute_ms):
    ceiling = next((r["au"] for r in rs if r["config"] == "memory"), None)
    head = (f"| configuration | steps | wait mean ms | p50 | p95 | p99 | max | first step "
            f"| steps > {compute_ms:g} ms | steps > 1 s | epoch s | AU |")
    rule = "|---|---|---|---|---|---|---|---|---|---|---|---|"
    if ceiling:
        head += " AU / in-memory AU |"
        rule += "---|"
    head += " origin reads | origin MB | metadata ops |"
    rule += "---|---|---|"
    lines = [head, rule]
    for r in rs:
        reads = "-" if r["reads"] is None else f"{r['reads']:,}"
        mb = "-" if r["bytes"] is None else f"{r['bytes'] / 1e6:,.0f}"
        meta = "-" if r["meta"] is None else f"{r['meta']:,}"
        line = (f"| {r['label']} | {r['steps']} | {ms(r['mean'])} | {ms(r['p50'])} "
                f"| {ms(r['p95'])} | {ms(r['p99'])} | {ms(r['max'])} | {ms(r['first'])} "
                f"| {r['over']} ({pct(r['over'], r['steps'])}) "
                f"| {r['over_1s']} ({pct(r['over_1s'], r['steps'])}) | {r['wall']:.1f} "
                f"| {100 * r['au']:.1f}% |")
        if ceiling:
            line += f" {100 * r['au'] / ceiling:.1f}% |"
        line += f" {reads} | {mb} | {meta} |"
        lines.append(line)
    return "\n".join(lines)


def targets(rs, compute_ms):
    """The issue's targets, checked against this run."""
    lines = []
    larder = {r["epoch"]: r for r in rs if r["config"] == "larder"}
    direct = [r for r in rs if r["config"] in DIRECT]
    memory = next((r for r in rs if r["config"] == "memory"), None)

    def mark(ok):
        return "met" if ok else "**missed**"

    warm = [r for e, r in sorted(larder.items()) if e >= 2]
    if warm:
        au = min(r["au"] for r in warm)
        over = sum(r["over"] for r in warm)
        worst = max(r["max"] for r in warm)
        later = max((w for r in warm for w in r["waits"][1:]), default=0.0)
        firsts = ", ".join(f"{ms(r['first'])} ms" for r in warm)
        lines.append(f"- larder from epoch 2: AU >= 99% ({mark(au >= 0.99)}: lowest "
                     f"{100 * au:.1f}%); no step waits longer than {compute_ms:g} ms "
                     f"({mark(over == 0)}: {over} step{'' if over == 1 else 's'} over, longest wait "
                     f"{ms(worst)} ms; "
                     f"each epoch's first step, which starts the DataLoader's workers, waited "
                     f"{firsts}; the longest wait of any later step was {ms(later)} ms).")
    if 1 in larder:
        r = larder[1]
        share = r["over"] / r["steps"] if r["steps"] else 0.0
        lines.append(f"- larder epoch 1 (cold): AU >= 95% ({mark(r['au'] >= 0.95)}: "
                     f"{100 * r['au']:.1f}%); at most 1% of steps waiting longer than "
                     f"{compute_ms:g} ms ({mark(share <= 0.01)}: {r['over']} of {r['steps']}, "
                     f"{100 * share:.2f}%, the first step's wait {ms(r['first'])} ms; "
                     f"{r['over_1s']} over 1 s).")
    for r in direct:
        share = r["over"] / r["steps"] if r["steps"] else 0.0
        lines.append(f"- {r['label']}, the heavy tail: median wait {ms(r['p50'])} ms, p99 "
                     f"{ms(r['p99'])} ms, max {ms(r['max'])} ms; {100 * share:.1f}% of steps "
                     f"over {compute_ms:g} ms, {pct(r['over_1s'], r['steps'])} over 1 s; "
                     f"AU {100 * r['au']:.1f}%.")
    if memory:
        lines.append(f"- The harness alone (in memory, no storage) reaches AU "
                     f"{100 * memory['au']:.1f}%, with a median wait of {ms(memory['p50'])} ms "
                     f"and a first step of {ms(memory['first'])} ms (the DataLoader's hand-over "
                     f"of each batch, starting its workers each epoch, the barrier, two cores "
                     f"shared by everything): the ceiling for every reader on this machine"
                     + (" (itself below the 99% target)" if memory["au"] < 0.99 else "")
                     + ".")
    full = [r for r in direct if r["steps"] == r["epoch_steps"]]
    for e, r in sorted(larder.items()):
        if r["steps"] != r["epoch_steps"] or not full:
            continue
        parts = [f"{b['wall'] / r['wall']:.1f}x faster than {b['label']} ({b['wall']:.1f} s)"
                 for b in full if b["steps"] == r["steps"]]
        if parts:
            lines.append(f"- larder epoch {e} took {r['wall']:.1f} s: " + ", ".join(parts) + ".")
    return "\n".join(lines)


def draw_plots(rs, compute_ms, results_dir, name):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = 1e-4  # waits below 0.1 ms are drawn at 0.1 ms
    colors = {"memory": "tab:gray", "h5": "tab:red", "files": "tab:orange"}
    larder_colors = ["tab:blue", "tab:green", "tab:purple", "tab:cyan"]
    paths = []
    n = len(rs)
    fig, axes = plt.subplots(n, 1, figsize=(9, 1.7 * n + 0.8), sharex=True, sharey=True)
    if n == 1:
        axes = [axes]
    top = max([compute_ms] + [1000 * w for r in rs for w in r["waits"]]) * 1.6
    for ax, r in zip(axes, rs):
        color = colors.get(r["config"]) or larder_colors[(r["epoch"] - 1) % len(larder_colors)]
        ys = [max(w, floor) * 1000 for w in r["waits"]]
        ax.plot(range(len(ys)), ys, lw=0.8, color=color)
        ax.axhline(compute_ms, ls="--", lw=0.8, color="black")
        ax.set_yscale("log")
        ax.set_ylim(floor * 1000 / 1.5, top)
        ax.set_title(f"{r['label']}: AU {100 * r['au']:.1f}%, {r['over']} of {r['steps']} "
                     f"steps over {compute_ms:g} ms", fontsize=9, loc="left")
        ax.set_ylabel("wait, ms", fontsize=8)
        ax.tick_params(labelsize=8)
    axes[-1].set_xlabel(f"global step (dashed: the {compute_ms:g} ms compute window)")
    fig.tight_layout()
    path = os.path.join(results_dir, f"{name}-waits.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)

    fig, ax = plt.subplots(figsize=(7.5, 5.8))
    for r in rs:
        ws = sorted(max(w, floor) * 1000 for w in r["waits"])
        m = len(ws)
        if not m:
            continue
        color = colors.get(r["config"]) or larder_colors[(r["epoch"] - 1) % len(larder_colors)]
        ccdf = [(m - k) / m for k in range(m)]  # share of steps waiting at least ws[k]
        ax.step(ws, ccdf, where="post", lw=1.4, color=color,
                ls=":" if r["config"] == "memory" else "-",
                label=f"{r['label']} (AU {100 * r['au']:.1f}%)")
    ax.axvline(compute_ms, ls="--", lw=0.8, color="black")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"per-step data wait, ms (dashed: the {compute_ms:g} ms compute window)")
    ax.set_ylabel("share of steps waiting at least this long")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    fig.tight_layout()
    path = os.path.join(results_dir, f"{name}-ccdf.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    return paths


def write(meta, results, results_dir, name, plots=True):
    """Write RESULTS_DIR/NAME.md (and the plots); returns (path, summary),
    the summary being the scale, the table and the targets as text."""
    compute_ms = meta["compute_ms"]
    rs = rows(results, compute_ms / 1000.0)
    os.makedirs(results_dir, exist_ok=True)
    commit = commit_text(meta)
    if meta.get("tree", {}).get("dirty"):
        print(f"report: the run's tree was dirty at {meta['tree']['commit']}: the results "
              f"claim no commit", file=sys.stderr)
    emulator = slowfs_params(results)
    if emulator is None:
        model = (f"profile {meta['profile']}; its parameters were not recorded by this run, "
                 f"see tools/slowfs/README.md")
    else:
        model = (f"as slowfs reported it: profile {emulator['profile']}, seed {emulator['seed']}: "
                 + describe_profile(emulator["params"]))
    generated = meta.get("generated_s")
    took = (f"the run took {meta['elapsed_s']:.0f} s, " +
            (f"{generated:.0f} s of it generating the dataset" if generated is not None
             else "the dataset already generated by an earlier run"))
    larder = next((r for r in results if r["config"] == "larder"), None)
    steps = max((r["epoch_steps"] for r in rs), default=0)
    extra = " ".join(meta.get("slowfs_options") or [])
    direct_epochs = meta["direct_epochs"]
    scale = (f"{meta['samples']:,} samples of {meta['sample_bytes'] / 1000:.0f} KB "
             f"({meta['samples'] * meta['sample_bytes'] / 1e9:.2f} GB per layout), global batch "
             f"{meta['batch']}, {steps} steps an epoch, {meta['ranks']} ranks x "
             f"{meta['workers']} DataLoader workers, {compute_ms:g} ms of compute per step, "
             f"slowfs profile {meta['profile']} (seed {meta['fs_seed']})")
    summary = "\n".join([f"Seed benchmark: {scale}.", "", table(rs, compute_ms), "",
                         targets(rs, compute_ms)])
    text = [
        "# The seed experiment: direct reads against larder on a slow shared file system",
        "",
        f"Written by `{meta['command']}` on "
        f"{meta.get('date') or time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{machine_text(meta)}; {commit}; {took}.",
        "",
        f"**Scale.** {meta['samples']:,} samples of {meta['sample_bytes'] / 1000:.0f} KB, like "
        f"the paper's (float32 fields \"graph\", 74 KB, and \"features\", 212 KB, random content "
        f"from seed {meta['seed']}; {meta['samples'] * meta['sample_bytes'] / 1e9:.2f} GB per "
        f"layout); global batch {meta['batch']} ({meta['batch'] // meta['ranks']} per rank), "
        f"{steps} steps an epoch; {meta['ranks']} ranks (separate processes, torch.distributed "
        f"over gloo on 127.0.0.1, each step ending in a one-number all_reduce) x "
        f"{meta['workers']} DataLoader workers each; {compute_ms:g} ms of emulated compute per "
        f"step (a sleep); {direct_epochs} epoch{'s' if direct_epochs != 1 else ''} of each "
        f"reader without a cache (every epoch of those reads everything again), "
        f"{meta['epochs']} of larder.",
        "",
        f"**Storage.** Every reader reads through its own fresh mount of `build/slowfs "
        f"--profile {meta['profile']} --seed {meta['fs_seed']}{(' ' + extra) if extra else ''}` "
        f"over the same source directory: the same emulator, profile and seed for all "
        f"({model}; tools/slowfs/README.md explains the model). Origin "
        f"reads and bytes are slowfs's own counters over the epoch (every read that reached "
        f"the slow file system); metadata ops are its opens, getattrs and listings.",
        "",
        "**Readers.** *PyTorch + h5py*: a map-style Dataset that opens `samples.h5` (one group "
        "per sample holding datasets \"graph\" and \"features\": the paper's baseline layout, "
        "h5py defaults) in each worker and reads one group per `__getitem__`; "
        "DistributedSampler (shuffle, seed); torch DataLoader with batch G / ranks. *File per "
        "sample*: the same over one file per sample (one read each). *larder*: "
        "`larder.torch.IterableDataset` + `larder.torch.DataLoader` over shards packed from "
        "the same HDF5 file (`larder pack --hdf5-depth 1`) on the slow mount, with a node cache "
        "on local disk shared by the ranks, empty before epoch 1, and the library's defaults "
        f"(read_ahead 1, prefetch 8 steps{', plus ' + json.dumps(larder['larder_options']) if larder and larder.get('larder_options') else ''}). "
        "*In memory*: no storage at all, the same two arrays every time: what the harness "
        "itself costs on this machine.",
    ]
    if larder and not larder.get("index_error"):
        text += ["",
                 f"**The index** ({larder['index_bytes'] / 1e6:.1f} MB) is opened on the slow "
                 f"mount as well: liblarder reads it into memory (slowfs's files cannot be "
                 f"mapped), once in every process that opens the dataset, so each epoch's new "
                 f"DataLoader workers read it again: those are the few origin reads of the warm "
                 f"epochs (in reads of at most 1 MiB, FUSE's request size)."]
    if larder and larder.get("index_error"):
        text += ["",
                 f"**Note: the index.** larder cannot open its index on the slow mount "
                 f"(`{larder['index_error']}`: liblarder maps the index with MAP_SHARED, which "
                 f"the kernel refuses for slowfs's direct_io files), so larder opened a local "
                 f"copy of the same index ({larder['index_bytes'] / 1e6:.1f} MB) whose shard "
                 f"names are symbolic links to the shards on the mount: every shard read went "
                 f"through slowfs and is counted; the index's own reads (one file, read once "
                 f"per process) are not."]
    text += [
        "",
        "**Wait** is, per global step, the longest time any rank's training loop waited for "
        "its next batch from its DataLoader (a synchronous job waits for its slowest rank); "
        "the first step's includes starting the DataLoader's workers, as every epoch does. "
        "AU = compute time / epoch wall time.",
        "",
        table(rs, compute_ms),
        "",
        "## Targets",
        "",
        targets(rs, compute_ms),
    ]
    if larder:
        text += ["", "larder's own view of the same epochs (rank 0: the time a worker blocked on "
                 "a step's reads, before the DataLoader's queue; `IterableDataset.wait_stats()`):",
                 ""]
        for r in rs:
            w = r["reader_waits"]
            if r["config"] == "larder" and w:
                text.append(f"- epoch {r['epoch']}: mean {ms(w['mean'])} ms, p99 {ms(w['p99'])} "
                            f"ms, max {ms(w['max'])} ms, {100 * w.get('over', 0):.1f}% of steps "
                            f"over {compute_ms:g} ms")
    if plots:
        paths = draw_plots(rs, compute_ms, results_dir, name)
        text += ["", "## Plots", "",
                 "Per-step wait over each epoch (as the paper's Figure 4) and its complementary "
                 "CDF (as Figure 5):", ""]
        text += [f"![{os.path.basename(p)}]({os.path.basename(p)})" for p in paths]
    text.append("")
    path = os.path.join(results_dir, f"{name}.md")
    with open(path, "w") as f:
        f.write("\n".join(text))
    return path, summary


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("saved")
    p.add_argument("--results", default="bench/results")
    p.add_argument("--name")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args()
    with open(args.saved) as f:
        saved = json.load(f)
    path, _ = write(saved["meta"], saved["results"], args.results,
                    args.name or saved["meta"]["name"], plots=not args.no_plots)
    print(path)


if __name__ == "__main__":
    main()
