#!/usr/bin/env python3
"""Draws one training run's metrics.csv as a PNG.

Reads the file `wgml train` (an MLP) or `wgml gpt train` writes, told apart by the header:
the training loss of each step against the step, with the test (MLP) or validation (GPT)
loss where the file has it; for the MLP a second panel of accuracy, the batch's at each step
and the test set's at each epoch's end. Runs of more than 100 steps also get a trailing mean,
drawn over the raw values and labelled as such.

    .venv/bin/python scripts/plot_metrics.py out/demo/metrics.csv [-o plot.png]
        [--width 1200] [--height 800] [--title TEXT]

Bad input (a missing or empty file, a header alone, a header of neither command, a row that
is not numbers) is exit 2 with a message; a PNG that cannot be written is exit 1.
"""
import argparse
import csv
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
except ImportError as e:
    sys.exit(f"plot_metrics: {e}: run it with the project's .venv/bin/python (made by make deps)")

# The headers the two trainers write (tools/train.c, tools/gpt.c), with what each one's
# held-out numbers are called.
FORMATS = {
    "step,epoch,loss,accuracy,lr,test_loss,test_accuracy,samples_per_s,elapsed_s": ("wgml train", "test"),
    "step,loss,lr,grad_norm,val_loss,tokens_per_s,elapsed_s": ("wgml gpt train", "validation"),  # runs written before mixed precision
    "step,loss,lr,grad_norm,val_loss,tokens_per_s,elapsed_s,loss_scale,skipped_steps": ("wgml gpt train", "validation"),
}
DPI = 100
SMOOTH_FROM = 100  # steps: fewer are drawn raw only


class BadInput(Exception):
    pass


def read_metrics(path):
    """(command, held-out name, {column: [float or None]}) of a metrics file."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read it: {e}")
    if not rows:
        raise BadInput(f"{path} is empty: no header, no rows")
    header = ",".join(rows[0])
    if header not in FORMATS:
        want = "\n  ".join(FORMATS)
        raise BadInput(f"{path}: unknown header '{header[:200]}'; want one of\n  {want}")
    names = rows[0]
    if not any(rows[1:]):
        raise BadInput(f"{path} has a header but no rows: nothing to plot")
    columns = {n: [] for n in names}
    for line, r in enumerate(rows[1:], start=2):
        if not r:
            continue
        if len(r) != len(names):
            raise BadInput(f"{path} line {line}: {len(r)} fields, want {len(names)}")
        for n, v in zip(names, r):
            try:
                columns[n].append(float(v) if v else None)
            except ValueError:
                raise BadInput(f"{path} line {line}: {n} is '{v[:40]}', not a number")
    if any(s is None for s in columns["step"]):
        raise BadInput(f"{path}: a row has no step")
    command, held_out = FORMATS[header]
    return command, held_out, columns


def present(steps, values):
    """The (steps, values) where a value was written."""
    pairs = [(s, v) for s, v in zip(steps, values) if v is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def trailing_mean(steps, values, window):
    """Each step's mean over the window of steps ending there (from the first full window)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return steps[window - 1:], out


def draw_series(ax, steps, values, what, color, window):
    """The raw values, and over them their trailing mean where the run is long enough."""
    s, v = present(steps, values)
    if window > 1 and len(v) >= 2 * window:
        ax.plot(s, v, color=color, linewidth=0.6, alpha=0.35, label=f"{what}, each step")
        ms, mv = trailing_mean(s, v, window)
        ax.plot(ms, mv, color=color, linewidth=1.6, label=f"{what}, mean of the last {window} steps")
    else:
        ax.plot(s, v, color=color, linewidth=1.0, marker="." if len(v) <= 50 else None, label=f"{what}, each step")


def draw_held_out(ax, steps, values, what, color):
    s, v = present(steps, values)
    if v:
        ax.plot(s, v, color=color, linewidth=1.2, marker="o", markersize=4,
                label=f"{what} (last {v[-1]:.4g} at step {s[-1]:.0f})")


def plot(path, out, width, height, title):
    command, held_out, c = read_metrics(path)
    steps = c["step"]
    window = max(2, len(steps) // 50) if len(steps) > SMOOTH_FROM else 1
    two = "accuracy" in c
    # inches x dpi is the PNG's size (matplotlib takes a product a hair short of an integer,
    # 4.02 x 100, as that integer); saved with the same dpi and no tight bounding box
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2 if two else 1, 1, sharex=True, squeeze=False)[:, 0]
    fig.suptitle(title if title is not None else f"{command}: {path}")

    ax = axes[0]
    draw_series(ax, steps, c["loss"], "training loss", "tab:blue", window)
    draw_held_out(ax, steps, c["test_loss" if "test_loss" in c else "val_loss"], f"{held_out} loss", "tab:red")
    ax.set_ylabel("cross-entropy loss")
    if two:
        ax = axes[1]
        draw_series(ax, steps, c["accuracy"], "batch accuracy", "tab:blue", window)
        draw_held_out(ax, steps, c["test_accuracy"], f"{held_out} accuracy", "tab:red")
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("step")
    try:
        fig.savefig(out, dpi=DPI, format="png")
    except OSError as e:
        print(f"plot_metrics: cannot write {out}: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="plot_metrics",
                                description="Draw the metrics.csv of wgml train or wgml gpt train as a PNG.")
    p.add_argument("csv", help="a run's metrics.csv")
    p.add_argument("-o", "--output", help="the PNG to write (default: beside the csv, metrics.png for metrics.csv)")
    p.add_argument("--width", type=int, default=1200, help="pixels (default 1200)")
    p.add_argument("--height", type=int, default=800, help="pixels (default 800)")
    p.add_argument("--title", help="the figure's title (default: the command and the csv's path)")
    a = p.parse_args(argv)
    # (below 300 x 200 the two panels' labels leave no room for the plots)
    for name, least in (("width", 300), ("height", 200)):
        v = getattr(a, name)
        if not least <= v <= 10000:
            p.error(f"--{name} is {v}: want {least} to 10000 pixels")
    out = a.output or os.path.splitext(a.csv)[0] + ".png"
    try:
        rc = plot(a.csv, out, a.width, a.height, a.title)
    except BadInput as e:
        print(f"plot_metrics: {e}", file=sys.stderr)
        return 2
    if rc == 0:
        print(out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
