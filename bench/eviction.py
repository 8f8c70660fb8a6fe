#!/usr/bin/python3
"""Eviction by next use against the clock and the offline optimum (issue 14).

For each cache capacity (a share of the dataset) and each policy (clock:
LARDER_EVICT=clock, today's; plan: next use from the registered plans), run
an emulated data-parallel training job (bench/seed/train.py: R ranks of
larder.torch over the shards on slowfs, W DataLoader workers each, a fixed
compute sleep per step) for E epochs from an empty cache, with
cache_size at that capacity.  Origin bytes per epoch are slowfs's own
count; AU = compute time / wall time.  One run with no capacity gives the
fully cached AU.  The offline optimum is bench/belady.py replayed over the
block sequence the plan run recorded (LARDER_EVICT_TRACE) at the same
capacity.  Writes NAME.md and NAME.png under --results.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"
sys.path.insert(0, os.path.join(HERE, "seed"))
import generate  # noqa: E402
import run as seed_run  # noqa: E402

BLOCK = 65536
LOAD_AT_START = os.getloadavg()[0]  # the machine's 1-minute load as the run began


def dataset_bytes(data_dir):
    shards = os.path.join(data_dir, "larder")
    return sum(os.path.getsize(os.path.join(shards, n)) for n in os.listdir(shards)
               if n != "index.larder" and not n.endswith(".deny"))


def one_run(args, name, data_dir, groups, capacity, policy):
    """One training run; returns train.py's result plus the trace path."""
    trace = os.path.join(args.work, f"trace-{name}.txt")
    if os.path.exists(trace):
        os.unlink(trace)
    os.environ["LARDER_EVICT"] = policy
    os.environ["LARDER_EVICT_TRACE"] = trace
    saved = args.larder_options
    args.larder_options = json.dumps({"cache_size": capacity})
    try:
        started = time.time()
        result = seed_run.run_config(args, "larder", data_dir, groups)
        result["trace"] = trace
        result["seconds"] = time.time() - started
        # the per-step waits, for where the time goes (bench/eviction_waits.py)
        with open(os.path.join(args.work, f"run-{name}.json"), "w") as f:
            json.dump(result, f)
    finally:
        args.larder_options = saved
        os.environ.pop("LARDER_EVICT", None)
        os.environ.pop("LARDER_EVICT_TRACE", None)
    return result


def epoch_rows(result):
    if "rows" in result:  # medians over rounds (merged)
        return result["rows"]
    rows = []
    for e in result["epochs"]:
        b, a = e["slowfs_before"], e["slowfs_after"]
        rows.append({"origin_bytes": a["bytes"] - b["bytes"],
                     "au": e["compute_s"] / e["wall_s"] if e["wall_s"] else 0.0})
    return rows


def median(values):
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def merged(runs):
    """Per epoch, the median over rounds of origin bytes and of AU."""
    rows = [epoch_rows(r) for r in runs]
    return {"rows": [{"origin_bytes": median([r[e]["origin_bytes"] for r in rows]),
                      "au": median([r[e]["au"] for r in rows])} for e in range(len(rows[0]))]}


def later_au(result):
    rows = epoch_rows(result)[1:]
    return sum(r["au"] for r in rows) / len(rows)


def belady(trace, capacity_blocks, epoch_reads):
    out = subprocess.run([PYTHON, os.path.join(HERE, "belady.py"), trace, "--capacity",
                          str(capacity_blocks), "--epoch-reads", str(epoch_reads)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def report(args, total, results, optimum, full, au_ratios):
    lines = []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, cwd=ROOT).stdout.strip()
    lines += ["# Eviction by next use (issue 14)", "",
              f"Written by `{args.command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
              f"{os.cpu_count()} cores; commit {commit}{' (with uncommitted changes)' if dirty else ''}; "
              f"load average {LOAD_AT_START:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.",
              "",
              f"{args.ranks} ranks x {args.workers} DataLoader workers of `larder.torch`, "
              f"global batch {args.batch}, {args.samples} samples of {generate.SAMPLE_BYTES} bytes "
              f"({total / 1e6:.0f} MB in shards), {args.epochs} epochs of a random plan (seed "
              f"{args.seed}), {args.compute_ms:g} ms of emulated compute per step, shards on "
              f"slowfs (profile {args.profile}, seed {args.fs_seed}), node cache on local disk, "
              "empty at the start of each run.  Origin bytes: what slowfs served, as a multiple "
              "of the dataset.  AU: compute / wall time of the epoch.  *optimum*: Belady's "
              "rule (with bypass) replayed by `bench/belady.py` over the block sequence the "
              "*plan* run recorded, in 64 KiB blocks.  *clock* is `LARDER_EVICT=clock` "
              "(the policy before issue 14), *plan* eviction by next use.", ""]
    head = "| capacity | policy | " + " | ".join(
        f"origin e{i + 1}" for i in range(args.epochs)) + " | " + " | ".join(
        f"AU e{i + 1}" for i in range(args.epochs)) + " | e2.. vs optimum |"
    lines += [head, "|" + "---|" * (3 + 2 * args.epochs)]
    full_au = [r["au"] for r in epoch_rows(full)]
    lines.append("| no limit | - | " + " | ".join(
        f"{r['origin_bytes'] / total:.2f}" for r in epoch_rows(full)) + " | " + " | ".join(
        f"{a:.3f}" for a in full_au) + " | - |")
    summary = {}
    for fraction in args.fractions:
        opt = optimum[fraction]
        opt_later = sum(e["bytes"] for e in opt["epochs"][1:])
        for policy in args.policies:
            rows = epoch_rows(results[fraction, policy])
            later = sum(r["origin_bytes"] for r in rows[1:])
            ratio = later / opt_later if opt_later else float("nan")
            summary[fraction, policy] = {"later_per_epoch": [r["origin_bytes"] / total
                                                             for r in rows[1:]],
                                         "vs_optimum": ratio, "au": [r["au"] for r in rows]}
            lines.append(f"| {fraction:.0%} | {policy} | " + " | ".join(
                f"{r['origin_bytes'] / total:.2f}" for r in rows) + " | " + " | ".join(
                f"{r['au']:.3f}" for r in rows) + f" | {ratio:.3f}x |")
        lines.append(f"| {fraction:.0%} | optimum | " + " | ".join(
            f"{e['bytes'] / total:.2f}" for e in opt["epochs"]) + " | " + " | ".join(
            "-" for _ in range(args.epochs)) + " | 1.000x |")
    lines += ["", "## Against the targets", ""]
    half = 0.5 if 0.5 in args.fractions else args.fractions[len(args.fractions) // 2]
    plan = summary[half, "plan"]
    lines.append(f"- Next use within 5% of the optimum's origin bytes (epochs 2..{args.epochs}): "
                 + ", ".join(f"{f:.0%}: {summary[f, 'plan']['vs_optimum']:.3f}x"
                             for f in args.fractions) + ".")
    lines.append(f"- At {half:.0%} capacity, epochs 2..{args.epochs} fetch "
                 + ", ".join(f"{x:.2f}x" for x in plan["later_per_epoch"])
                 + " the dataset (target at most 0.55x)"
                 + ("; the clock " + ", ".join(f"{x:.2f}x" for x in summary[half, "clock"]
                                                ["later_per_epoch"])
                    if "clock" in args.policies else "") + ".")
    ratios = au_ratios[half]
    lines.append(f"- AU at {half:.0%} capacity, epochs 2..{args.epochs}, against the fully cached "
                 f"run's of the same round: {median(ratios):.3f}"
                 + (f" (median of {len(ratios)} rounds: "
                    + ", ".join(f"{x:.3f}" for x in ratios) + ")" if len(ratios) > 1 else "")
                 + " (target at least 0.95).")
    lines.append("")
    lines.append(("Figures from one run each" if args.repeat == 1 else
                  f"Origin bytes and AU are medians over {args.repeat} rounds (each round runs "
                  "every row once)") + " on a shared 2-core machine: AU in particular moves by "
                 "several percent from run to run (the emulator's congestion episodes fall on "
                 "different epochs).")
    text = "\n".join(lines) + "\n"
    return text, summary


def cost_table(args, data_dir):
    """What one decision costs (bench/nextuse_cost.c over the same data, read
    locally, not through slowfs): the next use of one block, and one scan
    of every resident block for candidates."""
    tool = os.path.join(os.path.dirname(args.larder), "larder_bench_nextuse")
    cache = os.path.join(args.work, "cost-cache")
    shutil.rmtree(cache, ignore_errors=True)
    rows = []
    for readers in (1, 4, 16):
        out = subprocess.run([tool, os.path.join(data_dir, "larder", "index.larder"), cache,
                              "--readers", str(readers), "--repeat", "5"],
                             check=True, capture_output=True, text=True).stdout
        rows.append(out.strip())
    shutil.rmtree(cache, ignore_errors=True)
    return "\n".join(["", "## What a decision costs", "",
                      "`larder_bench_nextuse` (bench/nextuse_cost.c) on the same dataset, "
                      "every block resident, R plans registered (ranks of one world): the "
                      "median over 5 runs of one block's next use (with the lock and the "
                      "registry look it takes) and of one candidate scan (every resident block's "
                      "next use, the farthest kept).", "",
                      "| blocks | readers | ns per block | ms per scan |", "|---|---|---|---|"]
                     + rows) + "\n"


def plot(args, path, total, results, optimum):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.25
    xs = range(len(args.fractions))
    bars = [(("clock" if policy == "clock" else "next use (plan)"),
             [sum(r["origin_bytes"] for r in epoch_rows(results[f, policy])[1:])
              / (args.epochs - 1) / total for f in args.fractions]) for policy in args.policies]
    bars.append(("optimum (Belady)", [sum(e["bytes"] for e in optimum[f]["epochs"][1:])
                                      / (args.epochs - 1) / total for f in args.fractions]))
    for k, (label, values) in enumerate(bars):
        axes[0].bar([x + (k - 1) * width for x in xs], values, width, label=label)
    axes[0].set_xticks(list(xs), [f"{f:.0%}" for f in args.fractions])
    axes[0].set_xlabel("cache capacity (share of the dataset)")
    axes[0].set_ylabel("origin bytes per epoch, epochs 2.. (x dataset)")
    axes[0].legend()
    for k, policy in enumerate(args.policies):
        values = [sum(r["au"] for r in epoch_rows(results[f, policy])[1:]) / (args.epochs - 1)
                  for f in args.fractions]
        axes[1].bar([x + (k - 0.5) * width for x in xs], values, width,
                    label="clock" if policy == "clock" else "next use (plan)")
    axes[1].set_xticks(list(xs), [f"{f:.0%}" for f in args.fractions])
    axes[1].set_xlabel("cache capacity (share of the dataset)")
    axes[1].set_ylabel("AU, epochs 2..")
    axes[1].set_ylim(0, 1)
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default=os.path.join(ROOT, "bench/work/eviction"))
    p.add_argument("--samples", type=int, default=2560)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--compute-ms", type=float, default=150)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--fractions", default="0.25,0.5,0.75")
    p.add_argument("--profile", default="lustre-contended")
    p.add_argument("--fs-seed", type=int, default=7)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slowfs", default=os.path.join(ROOT, "build/slowfs"))
    p.add_argument("--larder", default=os.path.join(ROOT, "build/larder"))
    p.add_argument("--library", default=os.path.join(ROOT, "build/liblarder.so"))
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--results", default=os.path.join(ROOT, "bench/results"))
    p.add_argument("--name", default="eviction")
    p.add_argument("--command", default="bench/eviction.sh")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of every run: medians, and AU ratios within each round")
    p.add_argument("--policies", default="clock,plan", help="clock,plan or plan")
    args = p.parse_args()
    args.fractions = [float(x) for x in args.fractions.split(",")]
    args.policies = [x for x in ("clock", "plan") if x in args.policies.split(",")]
    if "plan" not in args.policies or args.repeat < 1:
        p.error("--policies must include plan, --repeat at least 1")
    args.larder_options = "{}"
    args.slowfs_option = []
    args.direct_epochs = 1
    args.direct_steps = 0
    os.makedirs(args.work, exist_ok=True)
    data_dir = os.path.join(args.work, "data")
    generate.generate(data_dir, args.samples, args.seed, args.larder, "64M")
    total = dataset_bytes(data_dir)
    groups = seed_run.Groups(os.path.join(args.work, "pids"))
    epoch_reads = args.samples // args.batch * args.batch
    runs, optima, au_ratios = {}, {}, {f: [] for f in args.fractions}
    seed_run.log(f"eviction: dataset {total / 1e6:.0f} MB")
    for k in range(args.repeat):
        tag = f"-r{k + 1}" if args.repeat > 1 else ""
        if tag:
            seed_run.log(f"eviction: round {k + 1} of {args.repeat}")
        full = one_run(args, "full" + tag, data_dir, groups, 0, "plan")
        runs.setdefault("full", []).append(full)
        for fraction in args.fractions:
            capacity = int(total * fraction)
            for policy in args.policies:
                seed_run.log(f"eviction: capacity {fraction:.0%}, {policy}")
                result = one_run(args, f"{fraction:g}-{policy}{tag}", data_dir, groups,
                                 capacity, policy)
                runs.setdefault((fraction, policy), []).append(result)
                rows = epoch_rows(result)
                seed_run.log("  origin per epoch: " + ", ".join(
                    f"{r['origin_bytes'] / total:.2f}x" for r in rows) + "; AU " + ", ".join(
                    f"{r['au']:.3f}" for r in rows))
            au_ratios[fraction].append(later_au(runs[fraction, "plan"][-1]) / later_au(full))
            optima.setdefault(fraction, []).append(
                belady(runs[fraction, "plan"][-1]["trace"], capacity // BLOCK, epoch_reads))
    full = merged(runs["full"])
    results = {key: merged(value) for key, value in runs.items() if key != "full"}
    optimum = {f: {"epochs": [{"bytes": median([o["epochs"][e]["bytes"] for o in opts])}
                              for e in range(len(opts[0]["epochs"]))]}
               for f, opts in optima.items()}
    text, summary = report(args, total, results, optimum, full, au_ratios)
    half = 0.5 if 0.5 in args.fractions else args.fractions[len(args.fractions) // 2]
    tag = f"-r{args.repeat}" if args.repeat > 1 else ""
    waits = subprocess.run([PYTHON, os.path.join(HERE, "eviction_waits.py"), args.work,
                            "--capacity-share", f"{half:g}", f"--tag={tag}"],
                           check=True, capture_output=True, text=True).stdout
    text += "\n".join(["", "## Where the time goes", "",
                        f"`bench/eviction_waits.py` over the last round: the per-step data waits "
                        f"(the slowest rank's) of the fully cached run and of next use at "
                        f"{half:.0%}, summed by quarter of each epoch, and the blocks each rule "
                        "fetches by quarter, replayed over that run's recorded block sequence.",
                        "", waits.strip(), ""])
    text += cost_table(args, data_dir)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, args.name + ".md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.work, "summary.json"), "w") as f:
        json.dump({f"{k[0]}-{k[1]}": v for k, v in summary.items()}, f)
    if not args.no_plot:
        plot(args, os.path.join(args.results, args.name + ".png"), total, results, optimum)
    print(text)


if __name__ == "__main__":
    main()
