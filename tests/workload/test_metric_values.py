"""What a batch's metric counts for: numpy scalars are numbers, a batch weighs as many
samples as it holds (a dict of targets is not its keys), and a per-sample metric is refused
saying its shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from advisor.core.errors import WorkloadError
from advisor.workload.contract import check_metric
from advisor.workload.defaults import batch_len


class _Workload:
    def where(self, func: str) -> str:
        return f"model.py: {func}()"


@pytest.mark.parametrize("value, expected", [(np.float32(0.5), 0.5), (np.float64(0.25), 0.25), (np.int64(3), 3.0),
                                             (torch.tensor(0.75), 0.75), (1, 1.0)])
def test_a_metric_may_be_any_real_scalar(value, expected):
    assert check_metric(_Workload(), value) == expected


def test_a_metric_per_sample_is_refused_with_its_shape():
    with pytest.raises(WorkloadError, match=r"metric\(\) must return a number, found Tensor of shape \(4,\) "
                                            r"\(one number per batch is expected\)"):
        check_metric(_Workload(), torch.ones(4))
    with pytest.raises(WorkloadError, match="found ndarray of shape"):
        check_metric(_Workload(), np.ones(3))
    with pytest.raises(WorkloadError, match="returned nan, expected a finite number"):
        check_metric(_Workload(), np.float32("nan"))


def test_a_batch_weighs_its_samples():
    x = {"input_ids": torch.zeros(5, 7), "mask": torch.ones(5, 7)}
    assert batch_len(x, torch.zeros(5)) == 5
    assert batch_len(x, {"cls": torch.zeros(5), "reg": torch.zeros(5, 2)}) == 5  # len() of the dict: 2
    assert batch_len((torch.zeros(3, 2), torch.zeros(3)), (torch.zeros(3), torch.zeros(3, 4))) == 3
    assert batch_len(torch.zeros(6, 1), [1, 2, 3, 4, 5, 6]) == 6  # a list of plain targets: the input's size
