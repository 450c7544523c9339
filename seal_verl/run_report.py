"""``seal-verl report``: plots, one self-contained HTML page and the paper-style tables from run folders.

A run folder is what a training run (``seal.run_dir``), ``seal-verl dry-run`` or ``seal-verl eval`` writes:

- training / dry run, read through ``seal_verl.run_folder``: the config, one row per step (label prevalence
  overall and per category, active cue kinds, rho, the weight statistics, success rate, cue tokens), every
  rollout's weight ``w`` and the validation rollouts (task id and score). Damaged rows are skipped with a
  warning; a file with nothing readable but damage is an error;
- evaluation: ``scores.json`` and ``labels.jsonl``.

Per run it draws label prevalence over steps (overall and per category), the cue kinds active per step, rho
over time, the distribution of w, reward and validation accuracy per category, and cue tokens per rollout;
per eval folder, accuracy and the label mix per category. Several runs give the side-by-side tables in the
form of the paper's Table 1 (accuracy per category and overall, one row per method) and Table 3 (ablations
against full SEAL). Reads files only: no verl, no BFCL import.
"""

from __future__ import annotations

import base64
import html
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field

from . import run_folder as RF
from . import taxonomy as T
from .atomic import atomic_write_text

#: Column order and headings of the paper's tables.
CATEGORY_COLUMNS = (("multi_turn_base", "Base"), ("multi_turn_miss_func", "Miss Func"),
                    ("multi_turn_miss_param", "Miss Param"), ("multi_turn_long_context", "Long Context"))
LABELS = (T.PASS,) + tuple(l for l in T.PRIORITY if l != T.PASS) + (T.SPURIOUS_TOOL_CALL,)
PALETTE = {"pass": "#55A868", "invalid_tool_call": "#C44E52", "argument_mismatch": "#DD8452",
           "state_mismatch": "#8172B3", "recovery_failure": "#937860", "missing_tool_call": "#DA8BC3",
           "response_mismatch": "#8C8C8C", "spurious_tool_call": "#CCB974"}
ABLATION_ORDER = ("SEAL", "SEAL w/o env side", "SEAL w/o reweighting", "SEAL w/o closed loop", "GRPO")


class ReportError(Exception):
    """A run folder that cannot be read (one line naming the folder or file)."""


@dataclass
class Run:
    name: str
    path: str
    kind: str  # "training" or "eval"
    variant: str = ""
    steps: list = field(default_factory=list)            # metrics.jsonl rows
    weights: dict = field(default_factory=dict)          # step -> [w]
    validation: dict = field(default_factory=dict)       # validation step -> {category: [n, n_valid]}
    eval_scores: dict | None = None
    eval_labels: list = field(default_factory=list)      # labels.jsonl rows
    warnings: list = field(default_factory=list)         # rows or files skipped as damaged

    def accuracy(self) -> dict[str, float]:
        """Per-category accuracy the tables report: the eval scores, else the last validation."""
        if self.eval_scores:
            return {c: float(v["accuracy"]) for c, v in self.eval_scores.get("categories", {}).items()}
        if self.validation:
            last = self.validation[max(self.validation)]
            return {c: nv / n for c, (n, nv) in last.items() if n}
        return {}

    def source(self) -> str:
        if self.eval_scores:
            p = self.eval_scores.get("protocol", {})
            return (f"seal-verl eval, {p.get('mode')} mode ({p.get('call_format')}), split {p.get('split')}, "
                    f"temperature {p.get('temperature')}, {sum(v['n'] for v in self.eval_scores['categories'].values())} task(s)")
        if self.validation:
            last = self.validation[max(self.validation)]
            return f"validation at step {max(self.validation)} ({sum(n for n, _ in last.values())} rollouts, bfcl loop)"
        return "no accuracy recorded"


def _rows(rows_and_damage: tuple[list, list], warnings: list, strict: bool = True) -> list[dict]:
    """Rows read by ``run_folder``; damaged lines become warnings, or (``strict``) an error when nothing else is
    readable. Not strict for the files of which the report reads a part (one step's rollouts, the validation):
    one of ten thousand trace files lost to a disk error costs its weights, not the report."""
    rows, damage = rows_and_damage
    bad = [d for d in damage if not d.cut]
    if strict and bad and not rows:
        raise ReportError(str(bad[0]))
    warnings += [f"skipped {d}" for d in damage]
    return rows


def _read_json(path: str) -> dict:
    obj, damage = RF.read_object(path)
    if damage is not None:
        raise ReportError(str(damage))
    return obj or {}


def variant_name(config: dict) -> str:
    """SEAL, GRPO or an ablation, from the run's ``seal.switches`` (or its recipe's variant)."""
    seal = config.get("seal")
    sw = seal.get("switches") if isinstance(seal, dict) else None
    sw = sw if isinstance(sw, dict) else {}
    env, rw, loop = (bool(sw.get(k, True)) for k in ("env_side", "reweighting", "closed_loop"))
    recipe = str(config.get("variant") or "").lower()
    if recipe == "grpo" or (not env and not rw):
        return "GRPO"
    if not env:
        return "SEAL w/o env side"
    if not rw:
        return "SEAL w/o reweighting"
    if not loop:
        return "SEAL w/o closed loop"
    return "SEAL"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _category(task_id: str) -> str:
    return str(task_id).rsplit("_", 1)[0]


# ----------------------------------------------------------------------------------------- row checks
# A row that parses as JSON can still hold anything in any field (a hand-edited file, a row of another tool, a
# disk error inside a string). The plots and tables below read numbers, tables and lists; these checks make
# every row hold exactly that, leaving out what does not fit with one warning per row, so that one odd field
# costs that field, not the report.

#: step-row fields that hold one number, and those that hold a table of numbers
_STEP_NUMBERS = ("w_mean", "w_std", "w_min", "w_max", "success_rate", "cue_tokens_mean", "cue_tokens_max", "seconds")
_STEP_TABLES = ("prevalence", "prevalence_ema", "rate", "rate_ema", "rho", "rho_used", "metrics")


def _number(value) -> float | None:
    """``value`` as a finite float, or None when it is not a (finite) number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def _table(value) -> tuple[dict, bool]:
    """The string-keyed finite numbers of ``value`` and whether anything else was in it."""
    if not isinstance(value, dict):
        return {}, True
    kept = {k: _number(v) for k, v in value.items() if isinstance(k, str) and _number(v) is not None}
    return kept, len(kept) != sum(1 for v in value.values() if v is not None)


def _probe(value) -> tuple[dict | None, bool]:
    """A step's cue-effect summary with only the effects whose difference and interval are numbers."""
    if not isinstance(value, dict):
        return None, True
    out, bad = dict(value), False
    if "confidence" in out and _number(out["confidence"]) is None:
        out.pop("confidence")
        bad = True
    effects = value.get("effects")
    kept = {}
    for key, e in (effects.items() if isinstance(effects, dict) else ()):
        cell = {f: _number(e.get(f)) for f in ("diff", "lo", "hi", "with", "without")} if isinstance(e, dict) else {}
        if not isinstance(key, str) or any(cell.get(f) is None for f in ("diff", "lo", "hi")):
            bad = True
            continue
        bad = bad or any(e.get(f) is not None and cell[f] is None for f in ("with", "without"))
        kept[key] = dict(e, **cell)
    out["effects"] = kept
    return out, bad or not isinstance(effects, dict) and effects is not None


def _clean_step(row: dict, where: str, warnings: list) -> dict:
    """``row`` (a step row with an integer ``step``) with every field of the wrong kind left out or emptied."""
    out, bad = dict(row), []
    for key in _STEP_NUMBERS:
        if row.get(key) is not None and _number(row[key]) is None:
            out[key] = None
            bad.append(key)
    out["metrics"] = {}  # every plot reads it
    for key in _STEP_TABLES:
        if row.get(key) is not None:
            out[key], wrong = _table(row[key])
            bad += [key] if wrong else []
    for key in ("active_during", "active_next"):
        v = row.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(k, str) for k in v)):
            out[key] = [k for k in v if isinstance(k, str)] if isinstance(v, list) else []
            bad.append(key)
    if "global_step" in row and not _is_int(row["global_step"]):
        out.pop("global_step")
        bad += [] if row["global_step"] is None else ["global_step"]
    if row.get("cue_effect") is not None:
        out["cue_effect"], wrong = _probe(row["cue_effect"])
        bad += ["cue_effect"] if wrong else []
    if bad:
        warnings.append(f"{where}: step {row['step']}: left out what is not of its kind in {', '.join(bad)}")
    return out


def _scores(scores: dict, where: str, warnings: list) -> dict:
    """``scores.json`` with only the categories whose accuracy is in [0, 1] and whose count is an integer."""
    cats = {}
    for c, v in scores["categories"].items():
        acc = _number(v.get("accuracy")) if isinstance(v, dict) else None
        n = v.get("n") if isinstance(v, dict) else None
        if isinstance(c, str) and acc is not None and 0.0 <= acc <= 1.0 and _is_int(n) and n >= 0:
            cats[c] = dict(v, accuracy=acc, n=n)
        else:
            warnings.append(f"skipped {where}: category {str(c)[:60]!r}: accuracy and n are not a share and a count")
    protocol = scores.get("protocol")
    return dict(scores, categories=cats, protocol=protocol if isinstance(protocol, dict) else {})


def _label_row(row: dict) -> dict:
    """A ``labels.jsonl`` row with a string category and id and a list of string labels."""
    labels = row.get("labels")
    return dict(row, labels=[x for x in labels if isinstance(x, str)] if isinstance(labels, list) else [],
                category=row.get("category") if isinstance(row.get("category"), str) else None,
                id=str(row.get("id", "")))


def load_run(path: str, name: str | None = None) -> Run:
    """Read one run folder (training, dry run or eval)."""
    if not os.path.isdir(path):
        raise ReportError(f"{path}: not a folder")
    name = name or os.path.basename(os.path.normpath(path))
    if os.path.exists(os.path.join(path, "scores.json")):
        scores = _read_json(os.path.join(path, "scores.json"))
        if not isinstance(scores.get("categories"), dict):
            raise ReportError(f"{os.path.join(path, 'scores.json')}: field 'categories' missing")
        run = Run(name=name, path=path, kind="eval")
        run.eval_scores = _scores(scores, os.path.join(path, "scores.json"), run.warnings)
        run.eval_labels = [_label_row(r) for r in _rows(RF.read_rows(os.path.join(path, "labels.jsonl")), run.warnings)]
        run.variant = str(run.eval_scores["protocol"].get("model") or "")
        return run
    if not any(os.path.exists(os.path.join(path, f)) for f in (RF.METRICS, RF.VALIDATION)):
        raise ReportError(f"{path}: neither a training run folder ({RF.METRICS}, {RF.VALIDATION}) "
                          "nor an eval folder (scores.json)")
    config = _read_json(os.path.join(path, RF.CONFIG))
    run = Run(name=name, path=path, kind="training", variant=variant_name(config))
    steps = _rows(RF.read_steps(path), run.warnings)
    run.warnings += [f"skipped {os.path.join(path, RF.METRICS)}: a step row without a step number"
                     for r in steps if not _is_int(r.get("step"))]
    metrics_file = os.path.join(path, RF.METRICS)
    run.steps = sorted((_clean_step(r, metrics_file, run.warnings) for r in steps if _is_int(r.get("step"))),
                       key=lambda r: r["step"])
    for k in RF.step_files(path).traces:
        run.weights[k] = [w for w in (_number(r.get("w")) for r in _rows(RF.read_traces(path, k), run.warnings, strict=False))
                          if w is not None]
    last_step = max((r.get("global_step", r["step"] + 1) for r in run.steps), default=0)
    val: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    val_file = os.path.join(path, RF.VALIDATION)
    for r in _rows(RF.read_validation(path), run.warnings, strict=False):
        acc = r.get("acc") if r.get("acc") is not None else r.get("score")
        acc = float(acc) if isinstance(acc, bool) else 0.0 if acc is None else _number(acc)
        step = r.get("global_step")
        if acc is None or not (step is None or _is_int(step)):
            run.warnings.append(f"skipped {val_file}: a row of task {str(r.get('task_id'))[:60]!r} whose "
                                "score or global_step is not a number")
            continue
        cell = val[last_step if step is None else step][_category(r.get("task_id", ""))]
        cell[0] += 1
        cell[1] += int(acc >= 1.0)
    run.validation = {s: dict(c) for s, c in sorted(val.items())}
    return run


# ---------------------------------------------------------------------------------------------- tables

def table1_rows(runs: list[Run]) -> list[list[str]]:
    """Rows ``[method, base, miss func, miss param, long context, overall]`` in percent (Table 1 form)."""
    rows = []
    for run in runs:
        acc = run.accuracy()
        cells = [f"{100 * acc[c]:.2f}" if c in acc else "-" for c, _ in CATEGORY_COLUMNS]
        present = [acc[c] for c, _ in CATEGORY_COLUMNS if c in acc]
        overall = f"{100 * sum(present) / len(present):.2f}" if present else "-"
        if present and len(present) < len(CATEGORY_COLUMNS):
            overall += "*"
        rows.append([_method(run)] + cells + [overall])
    return rows


def _method(run: Run) -> str:
    return f"{run.name} ({run.variant})" if run.variant and run.variant != run.name else run.name


def _overall(run: Run) -> float | None:
    acc = run.accuracy()
    vals = [acc[c] for c, _ in CATEGORY_COLUMNS if c in acc]
    return sum(vals) / len(vals) if vals else None


def table3_rows(runs: list[Run]) -> list[list[str]]:
    """Ablation rows ``[variant, overall, delta vs SEAL]`` (Table 3 form); empty without a full SEAL run."""
    training = [r for r in runs if r.kind == "training" and _overall(r) is not None]
    full = next((r for r in training if r.variant == "SEAL"), None)
    if full is None or len(training) < 2:
        return []
    base = _overall(full)
    order = {v: i for i, v in enumerate(ABLATION_ORDER)}
    rows = []
    for r in sorted(training, key=lambda r: order.get(r.variant, 99)):
        o = _overall(r)
        rows.append([_method(r), f"{100 * o:.2f}", "-" if r is full else f"{100 * (o - base):+.2f}"])
    return rows


def format_text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


TABLE1_HEADER = ["Method"] + [h for _, h in CATEGORY_COLUMNS] + ["Overall"]
TABLE3_HEADER = ["Variant", "Overall", "vs SEAL"]


# ---------------------------------------------------------------------------------------------- plots

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


def cue_effects(run: Run) -> dict[str, list[tuple[int, dict]]]:
    """Per key (``all`` and each cue kind): ``(step, effect)`` of every step that ran the cue-effect probe."""
    out: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for r in run.steps:
        probe = r.get("cue_effect")
        effects = probe.get("effects") if isinstance(probe, dict) else None
        if not isinstance(effects, dict):
            continue
        for key, e in effects.items():
            if isinstance(e, dict) and all(isinstance(e.get(f), (int, float)) for f in ("diff", "lo", "hi")):
                out[key].append((int(r["step"]), e))
    return dict(out)


def cue_effect_rows(runs: list[Run]) -> list[list[str]]:
    """``[run, key, probes, last effect [interval], with, without]``: the last probe of each key of each run."""
    rows = []
    for run in runs:
        for key, series in sorted(cue_effects(run).items(), key=lambda kv: (kv[0] != "all", kv[0])):
            step, e = series[-1]
            rows.append([run.name, key, str(len(series)), f"{e['diff']:+.2f} [{e['lo']:+.2f}, {e['hi']:+.2f}] (step {step})",
                         _share(e.get("with")), _share(e.get("without"))])
    return rows


def _share(value) -> str:
    return "-" if value is None else f"{float(value):.2f}"


CUE_EFFECT_HEADER = ["run", "cue", "probes", "last effect [interval]", "reward with", "reward without"]


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
    from .report import CategoryStats, plot

    stats: dict = {}
    for row in run.eval_labels:
        s = stats.setdefault(row.get("category") or _category(row.get("id", "")), CategoryStats())
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
        o = _overall(run)
        vals.append(100 * o if o is not None else float("nan"))
        pos = [g + (i - (len(runs) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(pos, vals, width, label=_method(run))
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


# ---------------------------------------------------------------------------------------------- page

def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(path: str) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    return f'<img alt="{html.escape(os.path.basename(path))}" src="data:image/png;base64,{data}">'


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "run"


def _drawn(run: Run, plots: list) -> list[str]:
    """The PNGs of ``plots`` (``(function, path)``) that could be drawn. Numbers that are valid but absurd (a
    weight of 1e308 in a hand-edited row) can make matplotlib fail; that figure is then left out with a warning
    and the rest of the report is written."""
    done = []
    for draw, path in plots:
        try:
            done.append(draw(run, path))
        except (ValueError, OverflowError, ArithmeticError, MemoryError) as exc:
            _plt().close("all")
            run.warnings.append(f"left out {os.path.basename(path)}: matplotlib could not draw it "
                                f"({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})")
    return done


@dataclass
class Report:
    html: str
    pngs: list
    text: str
    warnings: list = field(default_factory=list)  # damaged rows skipped, one line each


def build_report(paths: list[str], out: str, names: list[str] | None = None) -> Report:
    """Read the run folders, draw the PNGs into ``out``, write ``out/report.html``; returns what was written."""
    if names and len(names) != len(paths):
        raise ReportError(f"--names gives {len(names)} name(s) for {len(paths)} run folder(s)")
    runs = [load_run(p, names[i] if names else None) for i, p in enumerate(paths)]
    seen: dict = defaultdict(int)
    for r in runs:  # unique names: two folders called "seal" in different places
        seen[r.name] += 1
        if seen[r.name] > 1:
            r.name = f"{r.name}-{seen[r.name]}"
    os.makedirs(out, exist_ok=True)
    pngs, sections = [], []
    for run in runs:
        stem = os.path.join(out, _safe(run.name))
        if run.kind == "eval":
            figs = _drawn(run, [(plot_eval, stem + "_eval.png")])
            detail = f"<p>{html.escape(run.source())}</p>"
        else:
            figs = []
            if run.steps:
                figs = _drawn(run, [(plot_prevalence, stem + "_prevalence.png"),
                                    (plot_interface, stem + "_interface.png"),
                                    (plot_weights_reward, stem + "_weights_reward.png")]
                              + ([(plot_cue_effect, stem + "_cue_effect.png")] if cue_effects(run) else []))
            detail = (f"<p>{len(run.steps)} training step(s), {sum(len(w) for w in run.weights.values())} rollouts; "
                      f"accuracy: {html.escape(run.source())}</p>")
        pngs += figs
        sections.append(f"<h2>{html.escape(_method(run))}</h2><p class='path'>{html.escape(run.path)}</p>{detail}"
                        + "".join(f"<figure>{_img(p)}</figure>" for p in figs))
    t1 = table1_rows(runs)
    t3 = table3_rows(runs)
    text = "Table 1 form: accuracy (%) per category\n" + format_text_table(TABLE1_HEADER, t1)
    if any(r[-1].endswith("*") for r in t1):
        text += "\n* mean of the categories present"
    if t3:
        text += "\n\nTable 3 form: ablations against full SEAL\n" + format_text_table(TABLE3_HEADER, t3)
    effect_rows = cue_effect_rows(runs)
    if effect_rows:
        text += ("\n\nCue effect (training reward with minus without, same weights and tasks; last probe)\n"
                 + format_text_table(CUE_EFFECT_HEADER, effect_rows))
    comparison = ""
    if len(runs) > 1:
        pngs.append(plot_comparison(runs, os.path.join(out, "comparison.png")))
        comparison = f"<figure>{_img(pngs[-1])}</figure>"
    sources = "".join(f"<li>{html.escape(_method(r))}: {html.escape(r.source())}</li>" for r in runs)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>seal-verl report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1500px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #bbb; padding: 4px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
th {{ background: #f0f0f0; }}
img {{ max-width: 100%; }}
.path {{ color: #777; font-size: 85%; }}
</style></head><body>
<h1>seal-verl report</h1>
<h2>Accuracy per category (Table 1 form)</h2>
{_html_table(TABLE1_HEADER, t1)}
<ul>{sources}</ul>
{('<h2>Ablations (Table 3 form)</h2>' + _html_table(TABLE3_HEADER, t3)) if t3 else ''}
{('<h2>Cue effect (last probe)</h2>' + _html_table(CUE_EFFECT_HEADER, effect_rows)) if effect_rows else ''}
{comparison}
{''.join(sections)}
</body></html>
"""
    html_path = os.path.join(out, "report.html")
    atomic_write_text(html_path, page)
    return Report(html=html_path, pngs=pngs, text=text,
                  warnings=[f"{r.name}: {w}" for r in runs for w in r.warnings])
