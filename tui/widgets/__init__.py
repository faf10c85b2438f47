"""The explorer's widgets: the trial table, the scatter plot and the detail pane."""

from advisor.tui.widgets.detail import TrialDetail
from advisor.tui.widgets.scatter import ScatterPlot
from advisor.tui.widgets.trial_table import TrialTable

__all__ = ["ScatterPlot", "TrialDetail", "TrialTable"]
