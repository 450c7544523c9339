"""Benchmark: BFCL's official multi-turn checker vs our environment replay + verifier + Psi.

Side by side in one run, over all 800 BFCL V3 multi-turn tasks, each as its ground truth and as one seeded
perturbation of every kind in ``perturb.KINDS``:

(a) official: ``bfcl_eval``'s ``multi_turn_checker`` on the decoded trajectory, in this process (the inputs
    are our own benign generated call strings), with a fresh model name per check, as ``bfcl evaluate`` uses
    it; its instance cache lives in module globals and is never freed;
(b) ours: ``judge_result`` on the same trajectory rendered as a ``bfcl generate`` result entry (python, json
    and fc forms in rotation): decoding, replay through ``BFCLEnv`` (per-call schema checks, trace), the
    verifier (model path, ground-truth path, counterfactual copies after a failure; in a judge worker
    process under the rollouts' limits, see ``isolated_verify``) and Psi's labels.

The two are timed in alternating chunks so that background load hits both alike. Reported: checks per
second, the cost ratio time_b / time_a (wall and CPU time; ours' CPU includes its judge workers'), and
memory: RSS after 1k and after N checks of each path and the private memory of ours' judge workers (ours
must stay flat; the official cache grows), peak RSS, and tracemalloc peaks for a sample.

    python -m bench.bench_verifier            # full run (all 800 tasks, 20,000 checks per memory run)
    python -m bench.bench_verifier --quick    # 100 tasks, 2,000 checks per memory run
    python -m bench.bench_verifier --profile  # also cProfile our path and print where the time goes
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
import tracemalloc

os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bfcl-bench-"))

from env_wrappers.bfcl.environment.judge import judge_result  # noqa: E402
from env_wrappers.bfcl.environment.perturb import KINDS, ground_truth_steps, perturb, to_result  # noqa: E402
from env_wrappers.bfcl.environment.tasks import CATEGORIES, load_tasks  # noqa: E402

FORMATS = ("python", "json", "fc")


def rss_mb() -> float:
    """Current resident set size in MiB (Linux /proc; falls back to the peak elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return peak_rss_mb()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _children() -> list[int]:
    import multiprocessing

    return [p.pid for p in multiprocessing.active_children() if p.pid]


def children_cpu_s() -> float:
    """CPU seconds of this process's worker processes (ours judges in one): the ended ones from rusage, the
    live ones from /proc (clock ticks)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = ru.ru_utime + ru.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in _children():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def children_private_mb() -> float:
    """Private memory (MiB) of the live worker processes: what they hold beyond the pages shared with us."""
    total = 0
    for pid in _children():
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))
        except (OSError, IndexError, ValueError):
            pass
    return total / 1024


def build_cases(tasks: dict) -> list:
    """(task, decoded, rendered result, format) for the ground truth and every applicable perturbation."""
    cases = []
    i = 0
    for task in tasks.values():
        variants = [(ground_truth_steps(task), ())]
        for kind in KINDS:
            p = perturb(task, kind, 0)
            if p is not None:
                variants.append((p[0], (p[1],) if kind == "text_only" else ()))
        for decoded, text_turns in variants:
            fmt = FORMATS[i % len(FORMATS)]
            i += 1
            cases.append((task, decoded, to_result(task, decoded, fmt, text_turns=text_turns), fmt))
    return cases


class Official:
    """bfcl-eval's checker with its own task entries; a fresh model name per check."""

    def __init__(self):
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
        from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

        self.checker = multi_turn_checker
        self.cache = vars(multi_turn_utils)
        self.entries, self.truths = {}, {}
        for cat in CATEGORIES:
            self.entries.update({e["id"]: e for e in load_dataset_entry(cat)})
            self.truths.update({g["id"]: g["ground_truth"] for g in load_ground_truth_entry(cat)})
        self.n = 0

    def check(self, task, decoded) -> bool:
        self.n += 1
        r = self.checker(decoded, self.truths[task.id], self.entries[task.id], task.category, f"bench{self.n}")
        return r["valid"]

    def cached_instances(self) -> int:
        return sum(1 for k in self.cache if k.startswith("bench") and k.endswith("_instance"))

    def clear(self) -> None:
        for k in [k for k in self.cache if k.startswith("bench") and k.endswith("_instance")]:
            del self.cache[k]


def ours(case) -> bool:
    task, _, result, fmt = case
    return judge_result(task, result, call_format=fmt).valid


def timed_side_by_side(cases, official: Official, repeats: int, chunk: int) -> dict:
    """Alternate (a) and (b) chunk by chunk; each chunk runs ``repeats`` times per path and the fastest
    run counts (wall and CPU separately), so that bursts of load from other processes hit neither side."""
    wall = {"a": 0.0, "b": 0.0}
    cpu = {"a": 0.0, "b": 0.0}
    disagree = 0
    for s in range(0, len(cases), chunk):
        part = cases[s:s + chunk]
        best = {"a": [float("inf"), float("inf")], "b": [float("inf"), float("inf")]}
        for _ in range(repeats):
            w, c = time.perf_counter(), time.process_time()
            va = [official.check(t, d) for t, d, _, _ in part]
            w, c = time.perf_counter() - w, time.process_time() - c
            best["a"] = [min(best["a"][0], w), min(best["a"][1], c)]
            w, c = time.perf_counter(), time.process_time() + children_cpu_s()
            vb = [ours(case) for case in part]
            w, c = time.perf_counter() - w, time.process_time() + children_cpu_s() - c
            best["b"] = [min(best["b"][0], w), min(best["b"][1], c)]
        for k in "ab":
            wall[k] += best[k][0]
            cpu[k] += best[k][1]
        disagree += sum(x != y for x, y in zip(va, vb))
        # Drop the official checker's cached instances between chunks: left to grow (see the memory run),
        # they make every garbage-collector pass slower, for both paths alike.
        official.clear()
    return {"wall": wall, "cpu": cpu, "disagree": disagree}


def memory_run(name: str, fn, cases, n: int) -> dict:
    gc.collect()
    start, w_start = rss_mb(), children_private_mb()
    at_1k = w_1k = None
    for i in range(n):
        fn(cases[i % len(cases)])
        if i + 1 == min(1000, n):
            gc.collect()
            at_1k, w_1k = rss_mb(), children_private_mb()
    gc.collect()
    return {"name": name, "start": start, "at_1k": at_1k, "at_n": rss_mb(), "n": n, "peak": peak_rss_mb(),
            "workers": (w_start, w_1k, children_private_mb())}


def traced_peak(fn, cases, n: int) -> tuple[float, float]:
    """tracemalloc over n checks: (peak MiB, net growth MiB)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        fn(cases[i % len(cases)])
    gc.collect()
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return (peak - base) / 2**20, (cur - base) / 2**20


def profile_ours(cases, n: int, top: int) -> None:
    import cProfile
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    for case in cases[:n]:
        ours(case)
    pr.disable()
    st = pstats.Stats(pr, stream=sys.stdout)
    print(f"\n--- cProfile of our path over {n} checks (top {top} by cumulative time) ---")
    st.sort_stats("cumulative").print_stats(top)
    print(f"--- top {top} by own time ---")
    st.sort_stats("tottime").print_stats(top)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 tasks and 2,000 checks per memory run")
    ap.add_argument("--tasks", type=int, default=None, help="use the first N tasks of each category")
    ap.add_argument("--mem-checks", type=int, default=None, help="checks per memory run (default 20,000)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per chunk and path; the fastest counts")
    ap.add_argument("--chunk", type=int, default=200, help="checks per timed chunk (paths alternate by chunk)")
    ap.add_argument("--profile", action="store_true", help="cProfile our path and print the hot spots")
    args = ap.parse_args(argv)
    per_cat = args.tasks or (25 if args.quick else None)
    mem_n = args.mem_checks or (2_000 if args.quick else 20_000)

    all_tasks = load_tasks()
    if per_cat:
        tasks = {}
        for cat in CATEGORIES:
            for tid in [t for t in all_tasks if all_tasks[t].category == cat][:per_cat]:
                tasks[tid] = all_tasks[tid]
    else:
        tasks = all_tasks
    cases = build_cases(tasks)
    official = Official()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}")
    print(f"{len(tasks)} tasks, {len(cases)} checks per path (ground truth + {len(KINDS)} perturbation kinds; "
          f"ours on rendered results: {', '.join(FORMATS)} in rotation)")

    # Warm both paths over every input once (imports, class and per-task caches: the steady state of a
    # training run, where every task recurs), then drop the official instances that creates.
    for case in cases:
        official.check(case[0], case[1])
        ours(case)
    official.clear()

    # Memory of our path first, while no official cache exists in the process.
    mem_b = memory_run("ours", ours, cases, mem_n)

    t = timed_side_by_side(cases, official, args.repeats, args.chunk)
    n = len(cases)
    wa, wb, ca, cb = t["wall"]["a"], t["wall"]["b"], t["cpu"]["a"], t["cpu"]["b"]
    print("\n== time ==")
    print(f"(a) official multi_turn_checker : {n / wa:8.1f} checks/s  wall {wa:7.2f}s  cpu {ca:7.2f}s")
    print(f"(b) ours: replay + verify + Psi : {n / wb:8.1f} checks/s  wall {wb:7.2f}s  cpu {cb:7.2f}s")
    print(f"cost ratio time_b / time_a      : wall {wb / wa:.2f}x   cpu {cb / ca:.2f}x   (target <= 1.5x; "
          f"fastest of {args.repeats} runs per chunk of {args.chunk})")
    print(f"valid flags disagreeing (a vs b): {t['disagree']} of {n}")

    official.clear()
    gc.collect()
    mem_a = memory_run("official", lambda c: official.check(c[0], c[1]), cases, mem_n)
    cached = official.cached_instances()
    print("\n== memory (RSS MiB) ==")
    for m in (mem_b, mem_a):
        print(f"{m['name']:>9}: start {m['start']:7.1f}  after 1k {m['at_1k']:7.1f}  after {m['n'] // 1000}k "
              f"{m['at_n']:7.1f}  growth 1k->{m['n'] // 1000}k {m['at_n'] - m['at_1k']:+7.1f}  "
              f"process peak so far {m['peak']:7.1f}")
    w0, w1, wn = mem_b["workers"]
    print(f"ours' judge workers (private MiB, {len(_children())} live): start {w0:7.1f}  after 1k {w1:7.1f}  "
          f"after {mem_b['n'] // 1000}k {wn:7.1f}  growth 1k->{mem_b['n'] // 1000}k {wn - w1:+7.1f}")
    print(f"official global instance cache after its memory run: {cached} instances")
    official.clear()
    gc.collect()

    sample = min(500, len(cases))
    pb, gb = traced_peak(ours, cases, sample)
    pa, ga = traced_peak(lambda c: official.check(c[0], c[1]), cases, sample)
    official.clear()
    print(f"tracemalloc over {sample} checks: ours peak {pb:.2f} MiB, net {gb:+.2f} MiB; "
          f"official peak {pa:.2f} MiB, net {ga:+.2f} MiB")

    if args.profile:
        profile_ours(cases, min(len(cases), 1500), 30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
