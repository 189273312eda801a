#!/usr/bin/env python3
"""One chart of a benchmark sitting: ours beside the reference design and PostgreSQL's own
limit, as an SVG of horizontal bars (no plotting library needed).

    scripts/lib/chart.py figures.json chart.svg

figures.json: {"title": "...", "groups": [{"name": "orders/s (create-orders, 50 VUs)",
"unit": "/s", "better": "higher", "bars": [{"label": "services", "value": 786.6}, ...]}]}.
A bar whose value is null or not a number is drawn as "not measured"; a group with
"compare": false draws its bars without saying how the first compares. Each group has its own
scale (its longest bar fills the width), so groups of different units sit on one page; each
bar after the first says how the first (ours) compares with it.
"""

import json
import sys
from html import escape

WIDTH = 760
LABEL_W = 190
BAR_H = 18
GAP = 6
GROUP_GAP = 26
COLOURS = ["#2f6db5", "#9a9a9a", "#d18b2c", "#5a9e4b"]


def number(value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v == v else None  # NaN is "not measured"


def figure(v, unit):
    text = f"{v:,.0f}" if v >= 100 else f"{v:,.2f}"
    return f"{text}{unit}" if unit.startswith("/") else f"{text} {unit}"


def render(spec):
    rows = []
    y = 40
    rows.append(
        f'<text x="10" y="24" font-size="15" font-weight="bold">{escape(spec["title"])}</text>'
    )
    for group in spec["groups"]:
        bars = group["bars"]
        values = [number(bar["value"]) for bar in bars]
        top = max([v for v in values if v is not None] or [1.0])
        better = group.get("better", "higher")
        rows.append(
            f'<text x="10" y="{y + 12}" font-size="13" font-weight="bold">'
            f'{escape(group["name"])} ({better} is better)</text>'
        )
        y += 20
        first = values[0]
        for n, (bar, v) in enumerate(zip(bars, values)):
            rows.append(
                f'<text x="{LABEL_W - 8}" y="{y + 13}" font-size="12" text-anchor="end">'
                f'{escape(bar["label"])}</text>'
            )
            if v is None:
                rows.append(
                    f'<text x="{LABEL_W}" y="{y + 13}" font-size="12" fill="#888">not measured</text>'
                )
            else:
                w = max(1.0, (WIDTH - LABEL_W - 230) * v / top)
                colour = COLOURS[n % len(COLOURS)]
                note = figure(v, group.get("unit", ""))
                if n > 0 and first and v and group.get("compare", True):
                    if better == "lower" and v >= first:
                        note += f"  (ours {v / first:.1f}× less)"
                    elif better == "lower":
                        note += f"  (ours {first / v:.1f}× more)"
                    else:
                        note += f"  (ours {first / v:.2f}×)"
                rows.append(
                    f'<rect x="{LABEL_W}" y="{y}" width="{w:.1f}" height="{BAR_H}" fill="{colour}"/>'
                )
                rows.append(
                    f'<text x="{LABEL_W + w + 6:.1f}" y="{y + 13}" font-size="12">{escape(note)}</text>'
                )
            y += BAR_H + GAP
        y += GROUP_GAP - GAP
    height = y + 10
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
        + "\n".join(rows)
        + "\n</svg>\n"
    )


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: chart.py figures.json chart.svg")
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(render(spec))


if __name__ == "__main__":
    main()
