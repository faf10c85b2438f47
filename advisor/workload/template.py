"""The model.py templates written by `advisor init --template NAME`."""

PLAIN = '''"""A workload for `advisor tune`. Fill in model() and datasets(); the rest is optional.

    advisor tune model.py
"""

import torch
from torch import nn
from torch.utils.data import TensorDataset

# Your current setup. Trial 0 measures it (in fp32) and every result is compared with it.
BASELINE = {"batch_size": 64}
# What metric() measures: named in every output; "higher_is_better": False for a loss,
# perplexity or an error; "fraction": True for a value in [0, 1] (differences in points).
METRIC = {"name": "accuracy", "higher_is_better": True, "fraction": True}


def model() -> nn.Module:
    """Return a fresh model (for inference tuning: with trained weights)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


def datasets():
    """Return (train, validation): map-style datasets whose items are (input, target).
    The training set may be a stream instead (an IterableDataset whose __iter__ starts it
    again; trials then need --train-samples N).

    input may be a tensor (model(x)), a tuple (model(*x)) or a dict (model(**x)).
    model() and datasets() may download (download=True, from_pretrained): `advisor tune`
    calls them once before the study, so that caches fill; trials then read the caches
    (offline: HF_HUB_OFFLINE=1), so download into a cache and skip what is there.
    """
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 32, generator=g)
    y = (x[:, :4].argmax(dim=1))
    return TensorDataset(x[:1600], y[:1600]), TensorDataset(x[1600:], y[1600:])


# Optional. Defaults: cross entropy, top-1 accuracy, AdamW(lr=1e-3).
def loss(output, target):
    return nn.functional.cross_entropy(output, target)


def metric(output, target) -> float:
    """As METRIC describes it, for one batch; averaged over the validation set (in batches of
    BASELINE's size for every trial), each batch weighted by its samples."""
    return (output.argmax(dim=-1) == target).float().mean().item()


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=1e-3)


# Optional: items of different lengths (text, audio, graphs) need a function that makes a
# batch of them, padding each to the longest; it returns (input, target). Without it,
# torch's default collate stacks items, which must then all have the same shapes.
# def collate(items):
#     sequences = [x for x, _ in items]
#     padded = nn.utils.rnn.pad_sequence(sequences, batch_first=True)
#     lengths = torch.tensor([len(x) for x in sequences])
#     return {"tokens": padded, "lengths": lengths}, torch.tensor([y for _, y in items])
'''


TRANSFORMERS = '''"""A Hugging Face transformers model for `advisor tune`. Fill in model() and datasets().

    advisor tune model.py

from_pretrained("name") works: `advisor tune` calls model() and datasets() once before the
study, so that the weights land in Hugging Face's cache, and trials then load them from it
offline (HF_HUB_OFFLINE=1). This example builds its model from a config: nothing to fetch.
"""

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

BASELINE = {"batch_size": 16}
# The model computes its own loss when given labels in its input dict.
LOSS = "output.loss"
# The default metric reads the output's logits: top-1 accuracy per position, against the
# target's tokens (-100 where a position does not count).
METRIC = {"name": "next-token accuracy"}

CONTEXT, VOCAB = 64, 256


class Windows(Dataset):
    """Items are ({"input_ids", "labels"}, next tokens): transformers shifts the labels for
    its loss; the target, already shifted, is what the metric compares the logits with."""

    def __init__(self, tokens: torch.Tensor, count: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.tokens = tokens
        self.starts = torch.randint(0, len(tokens) - CONTEXT - 1, (count,), generator=g)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):
        s = int(self.starts[i])
        window = self.tokens[s:s + CONTEXT]
        return {"input_ids": window, "labels": window}, self.tokens[s + 1:s + CONTEXT + 1]


def datasets():
    """Replace with your tokenised data (on disk or made here): byte-level tokens of a text
    that repeats, so that there is something to learn."""
    text = ("advisor tunes a transformers model without glue. " * 400).encode()
    tokens = torch.tensor(list(text), dtype=torch.long)
    split = int(0.9 * len(tokens))
    return Windows(tokens[:split], 1024, 0), Windows(tokens[split:], 128, 1)


def model():
    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=1e-3)
'''

LIGHTNING = '''"""A Lightning workload for `advisor tune`: your LightningModule and LightningDataModule as
they are, no model() or datasets() needed.

    advisor tune model.py

advisor builds each class with no arguments (or calls model() / datamodule() if you define
them), takes the data from train_dataloader() / val_dataloader() (their batch size is the
baseline's), trains with training_step and configure_optimizers, and compares configurations
on the value validation_step logs under METRIC's name.
"""

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# Which value validation_step logs is the metric ("higher_is_better": False for a loss). Optional:
# without it, advisor reads it from what validation_step logs (here val_acc, the one score beside
# the loss) and says so; it asks when that is ambiguous.
METRIC = {"name": "val_acc", "higher_is_better": True, "fraction": True}


class Model(L.LightningModule):
    def __init__(self, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())  # averaged over the epoch

    def configure_optimizers(self):
        # self.trainer.estimated_stepping_batches and max_epochs are there in advisor's trials too
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


class Data(L.LightningDataModule):
    def __init__(self, batch_size: int = 64):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        """May download (once: the first `advisor tune` calls it before the study; trials then
        read the cache, offline), or use data on disk or generated here, as below."""
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2048, 32, generator=g)
        y = x[:, :4].argmax(dim=1)
        self.train_set, self.val_set = TensorDataset(x[:1600], y[:1600]), TensorDataset(x[1600:], y[1600:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)
'''

TEMPLATES = {"plain": PLAIN, "transformers": TRANSFORMERS, "lightning": LIGHTNING}
