"""``advisor.study.training_queue`` by its older name: advisor/study/tuner.py and parts.py
import it from here until they are updated (issue 28); remove this module with them."""

from advisor.study.training_queue import TrainingQueue as AccuracyQueue
from advisor.study.training_queue import Waiting, probe_result

__all__ = ["AccuracyQueue", "Waiting", "probe_result"]
