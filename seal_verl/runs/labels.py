"""Summaries of diagnosed rollouts: per-category accuracy and label prevalence, as a table and a plot.

Environment-neutral: it reads ``(category, valid, labels, abstention)`` rows, whatever produced them
(``seal-verl diagnose`` on result files, the dry run, a training run's traces).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from seal_verl.core import taxonomy as T

#: Label columns shown in tables and plots, in priority order (checker errors shown separately).
SHOWN_LABELS = (T.PASS,) + tuple(l for l in T.PRIORITY if l != T.PASS) + (T.SPURIOUS_TOOL_CALL,)


@dataclass
class CategoryStats:
    n_tasks: int = 0
    n_valid: int = 0
    label_counts: Counter = field(default_factory=Counter)

    @property
    def accuracy(self) -> float:
        return self.n_valid / self.n_tasks if self.n_tasks else 0.0

    def prevalence(self, label: str) -> float:
        total = sum(v for k, v in self.label_counts.items() if k != T.CHECKER_ERROR)
        return self.label_counts[label] / total if total else 0.0


def summarise(rows) -> dict[str, CategoryStats]:
    """``rows``: iterable of ``(category, valid, labels)``; returns stats per category (sorted)."""
    stats: dict[str, CategoryStats] = defaultdict(CategoryStats)
    for category, valid, labels in rows:
        s = stats[category]
        s.n_tasks += 1
        s.n_valid += int(bool(valid))
        s.label_counts.update(labels)
    return dict(sorted(stats.items()))


def overall_score(stats: dict[str, CategoryStats]) -> float:
    """BFCL's multi-turn score: the plain mean of the category accuracies."""
    return sum(s.accuracy for s in stats.values()) / len(stats) if stats else 0.0


def format_table(stats: dict[str, CategoryStats]) -> str:
    """A fixed-width text table: tasks, accuracy and label prevalence (% of labelled turns) per category."""
    short = {T.INVALID_TOOL_CALL: "invalid", T.ARGUMENT_MISMATCH: "arg", T.STATE_MISMATCH: "state",
             T.RECOVERY_FAILURE: "recov", T.MISSING_TOOL_CALL: "missing", T.RESPONSE_MISMATCH: "resp",
             T.PASS: "pass", T.SPURIOUS_TOOL_CALL: "spurious"}
    cols = ["category", "tasks", "acc%"] + [short[l] for l in SHOWN_LABELS] + ["chk_err"]
    widths = [max(24, max((len(c) for c in stats), default=0) + 1)] + [max(7, len(c) + 1) for c in cols[1:]]
    lines = ["".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cols, widths)))]
    for cat, s in stats.items():
        cells = [cat, str(s.n_tasks), f"{100 * s.accuracy:.2f}"]
        cells += [f"{100 * s.prevalence(l):.1f}" for l in SHOWN_LABELS]
        cells += [str(s.label_counts[T.CHECKER_ERROR])]
        lines.append("".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    lines.append(f"multi-turn score (mean of {len(stats)} categories): {100 * overall_score(stats):.2f}")
    return "\n".join(lines)


def plot(stats: dict[str, CategoryStats], path: str, title: str = "") -> None:
    """Accuracy per category (left) and the label mix of each category's turns (right, stacked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = list(stats)
    names = [c.replace("multi_turn_", "") for c in cats]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, 2]})
    accs = [100 * stats[c].accuracy for c in cats]
    ax1.bar(names, accs, color="#4C72B0")
    for i, a in enumerate(accs):
        ax1.text(i, a + 1, f"{a:.1f}", ha="center", fontsize=9)
    ax1.set_ylim(0, 105)
    ax1.set_ylabel("task accuracy (%)")
    ax1.set_title(f"accuracy (score {100 * overall_score(stats):.2f})")
    ax1.tick_params(axis="x", rotation=30)
    bottom = [0.0] * len(cats)
    palette = ["#55A868", "#C44E52", "#DD8452", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974"]
    for label, color in zip(SHOWN_LABELS, palette):
        vals = [100 * stats[c].prevalence(label) for c in cats]
        ax2.bar(names, vals, bottom=bottom, label=label, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax2.set_ylabel("share of labelled turns (%)")
    ax2.set_title("turn labels (Psi)")
    ax2.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    ax2.tick_params(axis="x", rotation=30)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
