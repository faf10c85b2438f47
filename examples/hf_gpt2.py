"""A Hugging Face transformers GPT-2, built from a config (nothing downloaded), learning the
Python standard library's own source code, tokenised by a byte-level BPE tokenizer that
`tokenizers` trains here in half a second. Written with the contract's additions for
library models only: the model returns its own loss (``LOSS``), and the default metric
reads the ``logits`` of its output (next-token accuracy, positions marked -100 left out).

    pip install transformers
    advisor tune examples/hf_gpt2.py

Each item is ({"input_ids": window, "labels": window}, next tokens): transformers shifts
the labels itself for its loss; the target, already shifted, is what the metric compares
the logits with.
"""

import os

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

BASELINE = {"batch_size": 16}
LOSS = "output.loss"
METRIC = {"name": "next-token accuracy"}  # the default metric, named for what it measures here

CONTEXT = 64
VOCAB = 512
MODULES = ("textwrap", "argparse", "difflib", "inspect", "dataclasses", "functools", "pathlib", "typing")
TRAIN_WINDOWS, VAL_WINDOWS = 2048, 256


def _tokens() -> torch.Tensor:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    root = os.path.dirname(os.__file__)
    texts = []
    for name in MODULES:
        path = os.path.join(root, name + ".py")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                texts.append(fh.read())
    if not texts:
        raise RuntimeError(f"no standard-library source found under {root} (a Python installed without .py files)")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return torch.tensor(tokenizer.encode("".join(texts)).ids, dtype=torch.long)


class Windows(Dataset):
    def __init__(self, tokens: torch.Tensor, starts: torch.Tensor) -> None:
        self.tokens, self.starts = tokens, starts

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):
        s = int(self.starts[i])
        window = self.tokens[s:s + CONTEXT]
        following = self.tokens[s + 1:s + CONTEXT + 1]
        return {"input_ids": window, "labels": window}, following


def datasets():
    tokens = _tokens()
    split = int(0.9 * len(tokens))  # the validation text comes after the training text
    g = torch.Generator().manual_seed(0)
    train = torch.randint(0, split - CONTEXT - 1, (TRAIN_WINDOWS,), generator=g)
    val = torch.randint(split, len(tokens) - CONTEXT - 1, (VAL_WINDOWS,), generator=g)
    return Windows(tokens, train), Windows(tokens, val)


def model():
    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=96, n_layer=2, n_head=4,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=3e-3)
