"""Helpers of bench/transform.sh (transforms next to the data).

  transform.py make DIR N             N JPEGs of a few hundred KB (PIL), DIR/src
  transform.py train OUT.json ...     one training run: AU and per-step waits
  transform.py watch SOCKET OUT.json  poll the daemon's placement every 0.25 s
  transform.py cost INDEX CACHE SPEC  CPU ms of one transform here (median of 5 x 50)
  transform.py report RESULTS.md PNG RUNS... -- TIMELINE.json EVENTS.json
"""

import json
import os
import statistics
import subprocess
import sys
import time


def make(root, n):
    import numpy as np
    from PIL import Image

    src = os.path.join(root, "src")
    os.makedirs(src, exist_ok=True)
    rng = np.random.default_rng(15)
    h, w = 600, 800
    y, x = np.mgrid[0:h, 0:w]
    for i in range(n):
        base = np.stack([(x * (i % 7 + 1)) % 256, (y * (i % 5 + 1)) % 256,
                         ((x + y + 13 * i) // 3) % 256], axis=-1)
        image = (base + rng.integers(0, 64, size=(h, w, 3))).clip(0, 255).astype(np.uint8)
        Image.fromarray(image).save(os.path.join(src, f"s{i:06d}.jpg"), quality=92)
        with open(os.path.join(src, f"s{i:06d}.cls"), "w") as f:
            f.write(str(i % 10))


def _pick(sample):
    return {"jpg": sample["jpg"], "cls": sample["cls"], "placement": sample["__placement__"]}


def train(out, index, cache, spec, batch, workers, sleep_ms, skip):
    """One epoch of a training loop with a compute sleep per step: AU over
    the steps after `skip` (compute time / wall time) and each step's wait."""
    import torch
    import larder.torch as lt

    ds = lt.IterableDataset(index, cache=cache, batch_size=batch, shuffle=True, seed=1,
                            transform=spec, decode=_pick, prefetch=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers,
                                         prefetch_factor=2, persistent_workers=False)
    waits, placements = [], {}
    started = None
    steps = 0
    t = time.perf_counter()
    for step, b in enumerate(loader):
        now = time.perf_counter()
        if step == skip:
            started = now
        if step >= skip:
            waits.append(now - t)
            for p in b["placement"]:
                placements[p] = placements.get(p, 0) + 1
            steps += 1
        time.sleep(sleep_ms / 1000)  # the accelerator's step
        t = time.perf_counter()
    wall = time.perf_counter() - started
    au = steps * sleep_ms / 1000 / wall
    result = {"au": au, "steps": steps, "wall_s": wall, "waits_s": waits,
              "placements": placements}
    with open(out, "w") as f:
        json.dump(result, f)
    print(f"AU {au:.3f} over {steps} steps, {wall:.1f} s; placements {placements}",
          file=sys.stderr)


def watch(larder, socket, out, stop_file):
    """Poll the daemon's transforms every 0.25 s until stop_file exists."""
    rows = []
    t0 = time.time()
    while not os.path.exists(stop_file):
        try:
            text = subprocess.run([larder, "stat", "--socket", socket, "--json"],
                                  capture_output=True, text=True, timeout=5).stdout
            t = json.loads(text)["transforms"]
            rows.append({"t": time.time() - t0, "placement": t["placement"],
                         "switches": t["switches"], "contention": t["contention"],
                         "cpu_busy": t["cpu_busy"], "cpu_self": t["cpu_self"],
                         "queue_wait_us": t["queue_wait_us"], "raw_shed": t["raw_shed"],
                         "raw_reader": t["raw_reader"], "transformed": t["transformed"]})
        except (subprocess.SubprocessError, ValueError, KeyError):
            pass
        time.sleep(0.25)
    with open(out, "w") as f:
        json.dump({"t0": t0, "rows": rows}, f)


def cost(index, cache, spec):
    """CPU milliseconds of one transformed read made in this process
    (in-process, no daemon): the median of 5 rounds of 50 samples."""
    import larder

    ds = larder.Dataset(index, cache=cache)
    for i in range(5):
        ds.get(i, transform=spec)
    rounds = []
    for _ in range(5):
        started = time.process_time()
        for i in range(50):
            ds.get(i, transform=spec)
        rounds.append((time.process_time() - started) * 1000 / 50)
    print(f"{statistics.median(rounds):.3f}")


def report(results, png, run_files, timeline_file, events_file, note):
    runs = {}
    for path in run_files:
        name = os.path.basename(path).rsplit("-", 1)[0]
        with open(path) as f:
            run = json.load(f)
        try:  # the daemon's STATS after the run (offload), for its busy share
            with open(path[:-len(".json")] + ".stat") as f:
                run["daemon"] = json.load(f)["transforms"]
        except (OSError, ValueError, KeyError):
            pass
        runs.setdefault(name, []).append(run)
    med = {k: statistics.median(r["au"] for r in v) for k, v in runs.items()}

    def waits(k):
        w = sorted(x for r in runs[k] for x in r["waits_s"])
        return (statistics.median(w) * 1000, w[int(0.95 * (len(w) - 1))] * 1000) if w else (0, 0)

    with open(timeline_file) as f:
        timeline = json.load(f)
    with open(events_file) as f:
        events = json.load(f)
    rows = timeline["rows"]
    on, off = events["burner_on"] - timeline["t0"], events["burner_off"] - timeline["t0"]
    end = rows[-1]["t"] if rows else 0

    def first(pred, after):
        return next((r["t"] - after for r in rows if r["t"] >= after and pred(r)), None)

    before = [r for r in rows if 2 <= r["t"] < on]  # past the start, before the burner
    before_contention = statistics.median(r["contention"] for r in before) if before else 0
    at_reader_before = sum(r["placement"] == "reader" for r in before) / max(len(before), 1)
    to_reader = first(lambda r: r["placement"] == "reader", on)
    to_daemon = first(lambda r: r["placement"] == "daemon", off)
    switches = rows[-1]["switches"] - rows[0]["switches"] if rows else 0
    per_minute = switches / (end / 60) if end else 0
    # switches beyond the two the load changes call for
    extra = max(0, switches - 2)

    lines = ["# Transforms next to the data (bench/transform.sh)", "", note, "",
             "| run | AU (median) | step wait p50 | step wait p95 | where samples were "
             "transformed | runs |",
             "|---|---|---|---|---|---|"]
    labels = {"client": "client-only: decode in the loader workers",
              "offload": "offloaded to larderd (its own core)",
              "burner-client": "daemon core saturated: client-only",
              "burner-fallback": "daemon core saturated: larderd with fallback"}
    for k in ("client", "offload", "burner-client", "burner-fallback"):
        if k not in runs:
            continue
        p50, p95 = waits(k)
        where = {}
        for r in runs[k]:
            for p, n in r["placements"].items():
                where[p] = where.get(p, 0) + n
        total = sum(where.values()) or 1
        where_text = ", ".join(f"{p} {100 * n / total:.0f}%" for p, n in sorted(where.items()))
        lines.append(f"| {labels[k]} | {med[k]:.3f} | {p50:.1f} ms | {p95:.1f} ms | "
                     f"{where_text} | {len(runs[k])} |")
    lines += ["", "| ratio | value | target |", "|---|---|---|"]
    if "client" in med and "offload" in med:
        r = med["offload"] / med["client"]
        lines.append(f"| offloaded AU / client-only AU | {r:.2f}x | >= 1.5x "
                     f"({'met' if r >= 1.5 else 'missed'}) |")
    busy = [r["placements"].get("daemon", 0) * r["daemon"]["run_us"] / 1e6 / r["wall_s"]
            for r in runs.get("offload", []) if r.get("daemon") and r["wall_s"] > 0]
    if busy:
        run_ms = [r["daemon"]["run_us"] / 1000 for r in runs["offload"] if r.get("daemon")]
        lines.append(f"| offloaded run: larderd's core busy with transforms (the samples it "
                     f"made x its run time / the run's wall time; median) | "
                     f"{100 * statistics.median(busy):.0f}% | near 100%: at capacity, what it "
                     f"sheds it could not have made in time |")
        lines.append(f"| offloaded runs: larderd's run time a transform (smoothed, at the end "
                     f"of each run) | {', '.join(f'{v:.1f} ms' for v in run_ms)} | about a "
                     f"decode's CPU here; more: other work took larderd's core |")
    if "burner-client" in med and "burner-fallback" in med:
        r = med["burner-fallback"] / med["burner-client"]
        lines.append(f"| daemon core saturated: fallback AU / client-only AU | {r:.3f} | "
                     f"within 5% ({'met' if r >= 0.95 else 'missed'}) |")
    fmt = (lambda v: f"{v:.2f} s" if v is not None else "never")
    lines += ["", "Placement over one run of %.0f s (a burner on larderd's core from %.1f s "
              "to %.1f s; the daemon's state polled every 0.25 s):" % (end, on, off), "",
              "| measure | value |", "|---|---|",
              f"| before the burner: contention (median) / share of polls at the readers | "
              f"{100 * before_contention:.0f}% / {100 * at_reader_before:.0f}% "
              "(other work on larderd's core counts as much as the burner) |",
              f"| burner on -> transforms at the readers | {fmt(to_reader)} |",
              f"| burner off -> transforms back at larderd | {fmt(to_daemon)} |",
              f"| switches in the run | {switches} ({extra} beyond the two load changes) |",
              f"| switches per minute | {per_minute:.1f} |", ""]
    with open(results, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
    keys = [k for k in ("client", "offload", "burner-client", "burner-fallback") if k in med]
    a.bar(range(len(keys)), [med[k] for k in keys],
          color=["#888", "#2a7", "#888", "#27a"][:len(keys)])
    a.set_xticks(range(len(keys)))
    a.set_xticklabels(["client-only", "offloaded", "busy daemon:\nclient-only",
                       "busy daemon:\nfallback"][:len(keys)])
    a.set_ylabel("accelerator utilization (median)")
    a.set_ylim(0, 1)
    ts = [r["t"] for r in rows]
    b.plot(ts, [r["contention"] for r in rows], label="contention (others' share)")
    b.plot(ts, [1.0 if r["placement"] == "reader" else 0.0 for r in rows],
           label="at the readers (1) / larderd (0)", drawstyle="steps-post")
    b.axvspan(on, off, color="#f0c0c0", alpha=0.4, label="burner on larderd's core")
    b.set_xlabel("seconds")
    b.set_ylim(-0.05, 1.1)
    b.legend(loc="upper right", fontsize=8)
    b.set_title("placement")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2], int(sys.argv[3]))
    elif cmd == "train":
        out, index, cache, spec, batch, workers, sleep_ms, skip = sys.argv[2:10]
        train(out, index, cache, spec, int(batch), int(workers), float(sleep_ms), int(skip))
    elif cmd == "cost":
        cost(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "watch":
        watch(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    elif cmd == "report":
        args = sys.argv[2:]
        sep = args.index("--")
        report(args[0], args[1], args[2:sep], args[sep + 1], args[sep + 2], args[sep + 3])
