"""Variable-length items and model.py's own collate(): scikit-learn's digits read as
sequences of pixel intensities (0-16) with their trailing blank pixels dropped, so each
item has its own length (from 40-odd to 64), padded per batch by collate(). The classifier
embeds each (position, intensity) token, averages over the item's own length (the padding
masked out) and reads the digit from that."""

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

BASELINE = {"batch_size": 32}
PAD = 64 * 17  # the token after every (position, intensity) pair


def datasets():
    from sklearn.datasets import load_digits

    digits = load_digits()
    items = []
    for pixels, label in zip(digits.data.astype(int), digits.target):
        end = len(pixels)
        while end > 1 and pixels[end - 1] == 0:
            end -= 1
        tokens = torch.arange(end) * 17 + torch.tensor(pixels[:end])  # (position, intensity) as one token
        items.append((tokens, int(label)))
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(items), generator=g).tolist()
    items = [items[i] for i in order]
    cut = int(0.8 * len(items))
    return items[:cut], items[cut:]


def collate(items):
    """Pads a batch's sequences with the padding token and keeps their lengths."""
    sequences = [x for x, _ in items]
    lengths = torch.tensor([len(x) for x in sequences])
    padded = pad_sequence(sequences, batch_first=True, padding_value=PAD)
    return {"tokens": padded, "lengths": lengths}, torch.tensor([y for _, y in items])


class Reader(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(PAD + 1, 64, padding_idx=PAD)
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(64, 10))

    def forward(self, tokens, lengths):
        summed = self.embed(tokens).sum(1)  # the padding embeds to zeros
        return self.head(summed / lengths.unsqueeze(1).to(summed.dtype))


def model():
    return Reader()


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=2e-2)
