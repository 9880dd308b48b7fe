"""The figure runners' panels: a titled row of subplots, mean +- std bands, learning curves per
setting, final return against a setting, and saving the figure.

    subplots()        a row of panels titled with the figure and the sweep's games, difficulty and seeds
    plot_band()       one mean curve with its +-1 std band
    plot_curves_by()  one such curve per value of a tag (staleness, batch divisor, ...)
    plot_final()      final return against a setting, one errorbar line per variant; final_label() its axis
    save_figure()     grid, legends, layout, PNG
    image_file()      argparse type of an output image: a file name matplotlib can write

The statistics come from analysis.py; matplotlib is imported (Agg backend) only when a figure is drawn.
"""
import argparse
import os

import analysis


def subplots(n, figure, args, seeds=None):
    """A row of n panels titled `figure` plus the games, difficulty and seeds (default: the sweep's)."""
    seeds = args.seeds if seeds is None else seeds
    seeds = f"seed{'s' if len(seeds) > 1 else ''} {' '.join(map(str, seeds))}"
    title = f"{figure} ({', '.join(args.envs)}; {args.distribution_mode}; {seeds})"
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, n, figsize=(max(4.6 * n, 7.5), 4), squeeze=False)  # one panel: room for the title
    fig.suptitle(title, fontsize="medium")
    return fig, list(axes[0])


def image_file(text):
    """-o's type: .png, .pdf, .svg or another format matplotlib writes, checked before anything is drawn."""
    from matplotlib.backend_bases import FigureCanvasBase
    if os.path.splitext(text)[1][1:].lower() not in FigureCanvasBase.get_supported_filetypes():
        raise argparse.ArgumentTypeError(f"must end in .png, .pdf, .svg or another image format, got {text}")
    return text


def save_figure(fig, out):
    import matplotlib.pyplot as plt
    for ax in fig.axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_band(ax, stats, label, colour=None, linestyle="-"):
    """A mean curve with a +-1 std band (stats from mean_curve / env_mean_curve); None draws nothing."""
    if stats is None:
        return
    line, = ax.plot(stats["x"], stats["mean"], color=colour, linestyle=linestyle, label=label)
    if stats["n"] > 1:
        ax.fill_between(stats["x"], stats["mean"] - stats["std"], stats["mean"] + stats["std"],
                        color=line.get_color(), alpha=0.15, linewidth=0)


def plot_curves_by(ax, loaded, tag, values, label, normalize, smooth_k=1, smooth_steps=None, **match):
    """Learning curves (mean over games, then mean +- std over seeds) of the runs whose tags match
    `match`, one per value of tag `tag`, coloured in order along viridis. Smoothed over smooth_k iterations,
    or over smooth_steps env steps: Fig. 2 compares batch sizes, so it smooths every one over the same env
    steps (a window in iterations would average C times less experience at divisor C)."""
    import matplotlib.pyplot as plt
    for i, value in enumerate(values):
        members = [r for r in loaded if r["tags"].get(tag) == value
                   and all(r["tags"].get(k) == v for k, v in match.items())]
        stats = analysis.env_mean_curve(members, smooth_k=smooth_k, normalize=normalize, smooth_steps=smooth_steps)
        plot_band(ax, stats, label(value), plt.get_cmap("viridis")(i / max(1, len(values) - 1)))
    ax.set_xlabel("env steps")
    ax.set_ylabel("normalised return" if normalize else "episodic return")


def plot_final(ax, finals, labels, xlabel, ylabel):
    """One errorbar line per variant through {(variant, x): seed_stats}: mean +- std over seeds."""
    for variant, label in labels.items():
        points = sorted((x, s) for (v, x), s in finals.items() if v == variant)
        if points:
            ax.errorbar([x for x, _ in points], [s["mean"] for _, s in points], yerr=[s["std"] for _, s in points],
                        marker="o", capsize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def final_label(metric):
    return "final normalised return" if metric == "normalized" else "final return"
