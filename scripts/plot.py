#!/usr/bin/env python3
"""plot.py -- bandwidth against size, ours against bare libfabric, as an SVG.

    scripts/plot.py [--log] OUT.svg RUN.json[=LABEL] [RUN.json[=LABEL] ...]

Each RUN.json is the output of `maestro bench pool --json` or `maestro bench fabric
--json`; every file gives its lines (ours solid, bare fi_read dashed, Open MPI dotted when
the run had --mpi) in one colour, labelled with LABEL or its provider and progress mode.
Sizes go on a log2 axis, GB/s on a linear one (`--log`: a log10 one, for runs where a
line is orders of magnitude above the others, such as same-node demands that map the
provider's memory). Files of `maestro bench pm --json` (any
number of runs, with different --subscribers) give the pool manager's rates against its
subscribers instead. Standard library only: no plotting package to install.
"""

import json
import math
import sys

PLOT_W, HEIGHT = 520, 430
LEFT, TOP, BOTTOM = 70, 40, 60
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def series(arg):
    """[(label, [(size, gbps)], style)] of one benchmark file (`PATH` or `PATH=LABEL`)."""
    path, _, label = arg.partition("=")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    rows = doc["rows"]
    what = "demand" if "p50_us" in rows[0] else "fabric layer"
    name = label or f'{doc["provider"]} {doc.get("progress", "")}'.strip()
    ours_key = "gbps" if what == "demand" else "ours_gbps"
    out = [(f"{what}, {name}", [(r["size"], r[ours_key]) for r in rows], "solid")]
    for key, title, style in (("raw_gbps", "bare fi_read", "dashed"),
                              ("mpi_gbps", "Open MPI send/recv", "dotted")):
        pts = [(r["size"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            out.append((f"{title}, {name}", pts, style))
    return out


def legend_width(labels):
    """The picture's width: the plot, then a legend wide enough for `labels`."""
    return LEFT + PLOT_W + 60 + 7 * max(len(label) for label in labels)


def axes(width, title, grid, y, ticks, xlabel, fmt):
    """The picture's start: background, title, horizontal grid lines at the values `grid`
    (labelled with `fmt`), the x ticks [(position, label)] and the x axis' name."""
    plot_h = HEIGHT - TOP - BOTTOM
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="14">{title}</text>',
    ]
    for v in grid:
        svg.append(f'<line x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   'stroke="#ddd"/>')
        svg.append(f'<text x="{LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{fmt(v)}</text>')
    for pos, label in ticks:
        svg.append(f'<text x="{pos:.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">'
                   f'{label}</text>')
    svg.append(f'<text x="{LEFT + PLOT_W / 2}" y="{HEIGHT - 15}" text-anchor="middle">'
               f'{xlabel}</text>')
    return svg


def legend(svg, k, colour, label, dash=""):
    """Entry `k` of the legend, right of the plot."""
    ly, lx = TOP + 10 + k * 20, LEFT + PLOT_W + 15
    svg.append(f'<line x1="{lx}" x2="{lx + 25}" y1="{ly}" y2="{ly}" stroke="{colour}" '
               f'stroke-width="2"{dash}/>')
    svg.append(f'<text x="{lx + 32}" y="{ly + 4}">{label}</text>')


def write(out, svg):
    svg.append("</svg>")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(svg) + "\n")


def size_label(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}"


def pm_plot(out, files):
    """The PM's rates against its subscribers, from `maestro bench pm --json` runs."""
    runs = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            runs.append(json.load(f))
    subs = sorted({r["subscribers"] for r in runs})
    keys = [("offers_per_sec", "declare+seal+offer / s"),
            ("events_per_sec", "events delivered / s")]
    mean = {}
    for key, _ in keys:
        for n in subs:
            vals = [r[key] for r in runs if r["subscribers"] == n and r.get(key)]
            if vals:
                mean[(key, n)] = sum(vals) / len(vals) / 1e6
    top_val = max(list(mean.values()) + [1.0])
    step = max(0.1, math.ceil(top_val / 5 * 10) / 10)
    top = step * 5
    width = legend_width([label for _, label in keys])
    plot_w, plot_h = PLOT_W, HEIGHT - TOP - BOTTOM
    span = (subs[-1] - subs[0]) or 1

    def x(n):
        return LEFT + (n - subs[0]) / span * plot_w

    def y(v):
        return TOP + plot_h - v / top * plot_h

    svg = axes(width, "Pool manager rate against subscribers "
               f"(millions/s; points: {len(runs)} runs, lines: means)",
               [step * i for i in range(6)], y, [(x(n), n) for n in subs], "subscribers",
               lambda v: f"{v:.1f}")
    for k, (key, label) in enumerate(keys):
        colour = COLOURS[k]
        pts = [(n, mean[(key, n)]) for n in subs if (key, n) in mean]
        if not pts:
            continue
        path = " ".join(f"{x(n):.1f},{y(v):.1f}" for n, v in pts)
        svg.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for r in runs:
            if r.get(key):
                svg.append(f'<circle cx="{x(r["subscribers"]):.1f}" '
                           f'cy="{y(r[key] / 1e6):.1f}" r="3" fill="{colour}"/>')
        legend(svg, k, colour, label)
    write(out, svg)


def main(argv):
    log = "--log" in argv
    argv = [a for a in argv if a != "--log"]
    if len(argv) < 3:
        sys.exit(__doc__)
    out, files = argv[1], argv[2:]
    with open(files[0].partition("=")[0], encoding="utf-8") as f:
        if "offers_per_sec" in json.load(f):
            return pm_plot(out, files)
    # (file index, label, points, style)
    lines = [(i, *s) for i, f in enumerate(files) for s in series(f)]
    width = legend_width([label for _, label, _, _ in lines])
    sizes = sorted({size for _, _, pts, _ in lines for size, _ in pts})
    values = [g for _, _, pts, _ in lines for _, g in pts]
    if log:
        bottom = math.floor(math.log10(max(min(v for v in values if v > 0), 1e-3)))
        decades = max(1, math.ceil(math.log10(max(values))) - bottom)
        grid = [10.0 ** (bottom + i) for i in range(decades + 1)]
    else:
        step = max(1, math.ceil(max(values) / 5))
        grid = [step * i for i in range(6)]
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])
    span = (hi - lo) or 1.0
    plot_w, plot_h = PLOT_W, HEIGHT - TOP - BOTTOM

    def x(size):
        return LEFT + (math.log2(size) - lo) / span * plot_w

    def y(gbps):
        if log:
            v = math.log10(max(gbps, grid[0])) - math.log10(grid[0])
            return TOP + plot_h - v / (len(grid) - 1) * plot_h
        return TOP + plot_h - gbps / grid[-1] * plot_h

    svg = axes(width, "Bandwidth against size (GB/s, 1e9 B/s)", grid, y,
               [(x(n), size_label(n)) for n in sizes], "size (bytes)", lambda v: f"{v:g}")
    for k, (file, label, pts, style) in enumerate(lines):
        # One colour per file (per line when there is one file); the style tells ours,
        # bare libfabric and MPI apart.
        colour = COLOURS[(file if len(files) > 1 else k) % len(COLOURS)]
        path = " ".join(f"{x(s):.1f},{y(g):.1f}" for s, g in pts)
        dash = {"solid": "", "dashed": ' stroke-dasharray="6,4"',
                "dotted": ' stroke-dasharray="2,3"'}[style]
        svg.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                   f'stroke-width="2"{dash}/>')
        for s, g in pts:
            svg.append(f'<circle cx="{x(s):.1f}" cy="{y(g):.1f}" r="3" fill="{colour}"/>')
        legend(svg, k, colour, label, dash)
    write(out, svg)


if __name__ == "__main__":
    main(sys.argv)
