"""A scatter plot of two chosen figures: front highlighted, baseline and selection marked,
infeasible trials drawn apart."""

from __future__ import annotations

from textual_plotext import PlotextPlot

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
        plt.title(f"x: {names[x]} · y: {names[y]}" if points else "no completed trial yet")
        self.refresh()
