"""The report's figures, one PNG each: label prevalence over steps, the cue kinds on per step, the cue effect per
probe, weights and reward, evaluation accuracy and the label mix, and several runs side by side."""

from __future__ import annotations


from seal_verl.core import taxonomy as T

from .report_load import Run, category_of
from .report_tables import CATEGORY_COLUMNS, cue_effects, method_label, overall_accuracy

LABELS = (T.PASS,) + tuple(l for l in T.PRIORITY if l != T.PASS) + (T.SPURIOUS_TOOL_CALL,)
PALETTE = {"pass": "#55A868", "invalid_tool_call": "#C44E52", "argument_mismatch": "#DD8452",
           "state_mismatch": "#8172B3", "recovery_failure": "#937860", "missing_tool_call": "#DA8BC3",
           "response_mismatch": "#8C8C8C", "spurious_tool_call": "#CCB974"}

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_steps(*axes, steps=None) -> None:
    """Whole-number step ticks; with one step only, a window of +-1 around it (not matplotlib's +-0.05)."""
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if steps and min(steps) == max(steps):
            ax.set_xlim(min(steps) - 1, max(steps) + 1)


def _series(run: Run, key: str, label: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in run.steps:
        v = (r.get(key) or {}).get(label)
        if v is not None:
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def plot_prevalence(run: Run, path: str) -> str:
    """Label prevalence over steps: overall, then one panel per category (from the ``seal/`` metrics)."""
    plt = _plt()
    cats = [c for c, _ in CATEGORY_COLUMNS
            if any(k.startswith(f"seal/prevalence_by_category/{c}/") for r in run.steps for k in r.get("metrics", {}))]
    n = 1 + len(cats)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), sharex=True, sharey=True, squeeze=False)
    axes = axes[0]
    for label in LABELS:
        xs, ys = _series(run, "prevalence", label)
        if xs:
            axes[0].plot(xs, ys, marker="o", ms=3, label=label, color=PALETTE[label])
    axes[0].set_title("all categories")
    for ax, cat in zip(axes[1:], cats):
        for label in LABELS:
            key = f"seal/prevalence_by_category/{cat}/{label}"
            pts = [(int(r["step"]), r["metrics"][key]) for r in run.steps if key in r.get("metrics", {})]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, color=PALETTE[label])
        ax.set_title(cat.replace("multi_turn_", ""))
    for ax in axes:
        ax.set_xlabel("training step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of labelled turns")
    _integer_steps(*axes, steps=[int(r["step"]) for r in run.steps])
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"{run.name}: turn-label prevalence (Psi)")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _active_kinds(run: Run) -> tuple[list[str], list[int], list[list[int]]]:
    kinds = sorted({k.split("/", 2)[2] for r in run.steps for k in r.get("metrics", {}) if k.startswith("seal/cue_active/")}
                   | {k for r in run.steps for k in (r.get("active_during") or [])})
    steps = [int(r["step"]) for r in run.steps]
    grid = [[int(k in (r.get("active_during") or [])) for r in run.steps] for k in kinds]
    return kinds, steps, grid


def plot_interface(run: Run, path: str) -> str:
    """Cue kinds active per step (during the step's rollouts), cue tokens per rollout, and rho over time."""
    plt = _plt()
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 3.8), gridspec_kw={"width_ratios": [1.3, 1, 1.2]})
    kinds, steps, grid = _active_kinds(run)
    if kinds and steps:
        a1.imshow(grid, aspect="auto", cmap="Greens", vmin=0, vmax=1, interpolation="nearest",
                  extent=(min(steps) - 0.5, max(steps) + 0.5, len(kinds) - 0.5, -0.5))
        a1.set_yticks(range(len(kinds)))
        a1.set_yticklabels(kinds, fontsize=8)
    if not any(any(row) for row in grid):
        a1.text(0.5, 0.5, "no cue kind on in any step", ha="center", va="center", transform=a1.transAxes)
    a1.set_xlabel("training step")
    a1.set_title("cue kinds on (green) during the step")
    xs = [int(r["step"]) for r in run.steps]
    a2.plot(xs, [float(r.get("cue_tokens_mean") or 0) for r in run.steps], marker="o", label="mean")
    a2.plot(xs, [float(r.get("cue_tokens_max") or 0) for r in run.steps], marker="x", ls="--", label="max")
    a2.set_title("cue tokens per rollout")
    a2.set_xlabel("training step")
    a2.legend(fontsize=8)
    a2.grid(alpha=0.3)
    for label in LABELS + ("correct_abstention",):
        sx, sy = _series(run, "rho", label)
        if sx:
            a3.plot(sx, sy, marker="o", ms=3, label=label, color=PALETTE.get(label, "#4C72B0"))
    a3.set_title("rho (label utility) after each step")
    a3.set_xlabel("training step")
    a3.grid(alpha=0.3)
    a3.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    _integer_steps(a1, a2, a3, steps=steps)
    fig.suptitle(f"{run.name}: training-time interface and rho")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_cue_effect(run: Run, path: str) -> str:
    """The cue effect per probe: mean training reward (the pass rate under a 0/1 reward) with minus without each cue kind (and the whole interface), with its
    interval; above zero the cue helps the policy that trains under it."""
    plt = _plt()
    found = cue_effects(run)
    keys = ["all"] + sorted(k for k in found if k != "all")
    fig, ax = plt.subplots(figsize=(8.5, 3.8))
    n = max(1, len(keys))
    for i, key in enumerate(keys):
        series = found.get(key) or []
        if not series:
            continue
        off = (i - (n - 1) / 2) * 0.08
        xs = [s + off for s, _ in series]
        ys = [float(e["diff"]) for _, e in series]
        err = [[y - float(e["lo"]) for y, (_, e) in zip(ys, series)], [float(e["hi"]) - y for y, (_, e) in zip(ys, series)]]
        ax.errorbar(xs, ys, yerr=err, marker="o", ms=4, capsize=3, lw=1.4 if key == "all" else 1.0,
                    color="#222222" if key == "all" else None, label="whole interface" if key == "all" else key)
    ax.axhline(0.0, color="#888888", lw=0.8)
    reach = max([0.25] + [abs(float(e[f])) for series in found.values() for _, e in series for f in ("lo", "hi")])
    ax.set_ylim(-min(1.05, reach * 1.15), min(1.05, reach * 1.15))
    ax.set_xlabel("training step (probe)")
    ax.set_ylabel("reward with - without")
    ax.set_title(f"{run.name}: cue effect (same weights, same tasks; interval {_level(run)})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    _integer_steps(ax, steps=sorted({s for series in found.values() for s, _ in series}))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _level(run: Run) -> str:
    """The probes' confidence level as a percentage (their summaries record it)."""
    for r in run.steps:
        probe = r.get("cue_effect")
        if isinstance(probe, dict) and isinstance(probe.get("confidence"), (int, float)):
            return f"{100 * float(probe['confidence']):g}%"
    return "95%"


def plot_weights_reward(run: Run, path: str) -> str:
    """The distribution of w (all rollouts, and per step), reward per step, validation accuracy per category."""
    plt = _plt()
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 3.8))
    all_w = [w for ws in run.weights.values() for w in ws]
    if all_w:
        a1.hist(all_w, bins=min(30, max(5, len(all_w) // 2)), color="#4C72B0", alpha=0.85)
    a1.set_title(f"w over {len(all_w)} rollouts")
    a1.set_xlabel("trajectory weight w")
    a1.set_ylabel("rollouts")
    xs = [int(r["step"]) for r in run.steps]
    means = [float(r.get("w_mean") or 0) for r in run.steps]
    stds = [float(r.get("w_std") or 0) for r in run.steps]
    a2.errorbar(xs, means, yerr=stds, marker="o", capsize=3, label="w mean +- std")
    a2.plot(xs, [float(r.get("success_rate") or 0) for r in run.steps], marker="s", label="reward (success rate)")
    a2.set_xlabel("training step")
    a2.set_title("weight and reward per step")
    a2.grid(alpha=0.3)
    a2.legend(fontsize=8)
    _integer_steps(a2, steps=xs)
    if len(run.validation) == 1:  # one validation: bars per category read better than lone points
        (vstep, cells), = run.validation.items()
        shown = [(short, cells[c]) for c, short in CATEGORY_COLUMNS if c in cells and cells[c][0]]
        bars = a3.bar([s for s, _ in shown], [nv / n for _, (n, nv) in shown], color="#4C72B0")
        for b, (_, (n, nv)) in zip(bars, shown):
            a3.text(b.get_x() + b.get_width() / 2, nv / n + 0.02, f"{nv}/{n}", ha="center", fontsize=8)
        a3.set_xlabel(f"category (validation after step {vstep})")
    elif run.validation:
        vsteps = sorted(run.validation)
        for cat, short in CATEGORY_COLUMNS:
            pts = [(s, run.validation[s][cat][1] / run.validation[s][cat][0]) for s in vsteps
                   if cat in run.validation[s] and run.validation[s][cat][0]]
            if pts:
                a3.plot(*zip(*pts), marker="o", label=short)
        a3.legend(fontsize=8)
        _integer_steps(a3, steps=vsteps)
        a3.set_xlabel("validation at step")
    else:
        a3.text(0.5, 0.5, "no validation recorded", ha="center", va="center", transform=a3.transAxes)
    a3.set_ylim(-0.02, 1.1)
    a3.set_title("validation accuracy per category")
    a3.grid(alpha=0.3)
    fig.suptitle(f"{run.name}: weights, reward and validation")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_eval(run: Run, path: str) -> str:
    """Accuracy and label mix per category of an eval folder."""
    from .labels import CategoryStats, plot

    stats: dict = {}
    for row in run.eval_labels:
        s = stats.setdefault(row.get("category") or category_of(row.get("id", "")), CategoryStats())
        s.n_tasks += 1
        s.n_valid += int(bool(row.get("valid")))
        s.label_counts.update(row.get("labels") or [])
    if not stats:  # scores only
        for c, v in run.eval_scores["categories"].items():
            stats[c] = CategoryStats(n_tasks=int(v["n"]), n_valid=int(round(v["accuracy"] * v["n"])))
    plot(dict(sorted(stats.items())), path, title=f"{run.name}: {run.source()}")
    return path


def plot_comparison(runs: list[Run], path: str) -> str:
    """Accuracy per category side by side (the Table 1 numbers as bars)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(7, 2.2 * (len(CATEGORY_COLUMNS) + 1)), 4.6))
    groups = [h for _, h in CATEGORY_COLUMNS] + ["Overall"]
    width = 0.8 / max(1, len(runs))
    for i, run in enumerate(runs):
        acc = run.accuracy()
        vals = [100 * acc.get(c, float("nan")) for c, _ in CATEGORY_COLUMNS]
        o = overall_accuracy(run)
        vals.append(100 * o if o is not None else float("nan"))
        pos = [g + (i - (len(runs) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(pos, vals, width, label=method_label(run))
        for b, v in zip(bars, vals):
            if v == v:
                ax.text(b.get_x() + b.get_width() / 2, v + 1, f"{v:.1f}", ha="center", fontsize=7)
    if not any(r.accuracy() for r in runs):
        ax.text(0.5, 0.5, "no accuracy recorded (no validation, no eval scores)", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylim(0, 105)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("BFCL V3 multi-turn accuracy by category")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=min(3, len(runs)), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
