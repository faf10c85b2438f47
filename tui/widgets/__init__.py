"""The explorer's widgets: the trial table, the scatter plot and the detail pane."""

from tui.widgets.detail import TrialDetail
from tui.widgets.scatter import ScatterPlot
from tui.widgets.trial_table import TrialTable

__all__ = ["ScatterPlot", "TrialDetail", "TrialTable"]
