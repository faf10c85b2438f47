"""A scatter plot of two chosen figures: front highlighted, baseline and selection marked,
infeasible trials drawn apart. Its ticks are round numbers ('4k 6k 8k'); the axes' titles
name the figure and its unit ('y: peak memory (MiB)' above, 'x: throughput (samples/s)' below)."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from advisor.tui.cells import nice_ticks, tick_labels
from advisor.tui.data import AXES, TrialRow


class ScatterPlot(PlotextPlot):
    """Draws completed trials on the chosen x and y axes."""

    def draw(self, rows: list[TrialRow], x: str, y: str, selected: int | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        points = [r for r in rows if r.state == "complete" and r.value(x) is not None and r.value(y) is not None]
        groups = (
            ("infeasible", [r for r in points if not r.feasible], "x", "gray"),
            ("feasible", [r for r in points if r.feasible and not r.on_front], "dot", "blue"),
            ("front", [r for r in points if r.on_front], "sd", "green+"),
            ("baseline", [r for r in points if r.baseline], "star", "yellow"),
            (f"trial {selected}", [r for r in points if r.number == selected], "cross", "red+"),
        )
        for label, group, marker, color in groups:
            if group:
                plt.scatter([r.value(x) for r in group], [r.value(y) for r in group], marker=marker, color=color,
                            label=label)
        names = {k: (points[0].metric.name if k == "metric" and points else AXES[k][0]) for k in (x, y)}
        if not points:
            plt.title("no completed trial yet")
            self.refresh()
            return
        for axis, ticks_of, lim_of in ((x, plt.xticks, plt.xlim), (y, plt.yticks, plt.ylim)):
            ticks = nice_ticks(min(r.value(axis) for r in points), max(r.value(axis) for r in points))  # type: ignore[type-var]
            if ticks:
                ticks_of(ticks, tick_labels(ticks))
                lim_of(ticks[0], ticks[-1])
        plt.title(f"y: {names[y]}")
        plt.xlabel(f"x: {names[x]}")
        self.refresh()
