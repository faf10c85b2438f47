"""A ResNet-style convolutional network (four stages of 64-512 channels, 11M parameters) on
scikit-learn's digits, upsampled to 64 x 64 RGB: the GPU check's conv model for
channels_last and cudnn_benchmark (benchmarks/gpu/README.md).

    advisor tune benchmarks/gpu/models/conv_net.py --space gpu
"""

import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

TINY = os.environ.get("ADVISOR_GPU_CHECK_TINY") == "1"  # a dry run of the check on a CPU
BASELINE = {"batch_size": 32 if TINY else 128}
SIDE = 16 if TINY else 64
WIDTHS = (8, 8, 16, 16, 32) if TINY else (64, 64, 128, 256, 512)


def datasets():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(SIDE, SIDE), mode="bilinear", align_corners=False).expand(-1, 3, -1, -1).contiguous()
    y = torch.tensor(digits.target, dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x), generator=g)
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    return TensorDataset(x[:cut], y[:cut]), TensorDataset(x[cut:], y[cut:])


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.skip(x))


def model():
    w = WIDTHS
    layers = [nn.Conv2d(3, w[0], 3, 1, 1, bias=False), nn.BatchNorm2d(w[0]), nn.ReLU()]
    for cin, cout, stride in ((w[0], w[1], 1), (w[1], w[2], 2), (w[2], w[3], 2), (w[3], w[4], 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w[4], 10)]
    return nn.Sequential(*layers)
