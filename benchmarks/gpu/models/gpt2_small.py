"""GPT-2 small (124M parameters: 12 layers, 768 wide, 12 heads, GPT-2's 50,257-token
vocabulary), built from a transformers config (nothing downloaded), at a context of 512
tokens: the GPU check's transformer (benchmarks/gpu/README.md).

It learns the Python standard library's own source code, tokenised by a byte-level BPE
tokenizer that `tokenizers` trains here in a few seconds (8,192 tokens; the model keeps
GPT-2's vocabulary size, so its embedding and output layer are GPT-2 small's); the tokens
are kept in a cache file ($XDG_CACHE_HOME or ~/.cache), so that each trial's process loads
them instead of training the tokenizer again (5 s a trial on the H100's host). Items are
({"input_ids": window, "labels": window}, next tokens), as in examples/hf_gpt2.py.

    advisor tune benchmarks/gpu/models/gpt2_small.py --space gpu
"""

import hashlib
import os
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

BASELINE = {"batch_size": 16}
LOSS = "output.loss"
METRIC = {"name": "next-token accuracy"}

TINY = os.environ.get("ADVISOR_GPU_CHECK_TINY") == "1"  # a dry run of the check on a CPU: 2 small layers
CONTEXT = 64 if TINY else 512
TOKENIZER_VOCAB = 1024 if TINY else 8192
MODULES = ("textwrap", "argparse", "difflib", "inspect", "dataclasses", "functools", "pathlib", "typing",
           "statistics", "fractions", "calendar", "shutil", "tarfile", "json/decoder", "logging/__init__",
           "collections/__init__", "enum", "ast", "tokenize", "pydoc", "subprocess", "threading", "zipfile",
           "email/message", "http/client", "urllib/request", "unittest/case", "asyncio/base_events")
TRAIN_WINDOWS, VAL_WINDOWS = (512, 64) if TINY else (4096, 256)


def _tokens() -> torch.Tensor:
    """The token stream, from the cache when it is there (keyed by what makes it)."""
    key = hashlib.sha256(repr((MODULES, TOKENIZER_VOCAB, sys.version_info[:2])).encode()).hexdigest()[:16]
    path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "advisor" / "gpu-check" / f"gpt2-tokens-{key}.pt"
    try:
        return torch.load(path, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError):  # not there yet, or unreadable
        pass
    tokens = _tokenise()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as fh:
            torch.save(tokens, fh)
        os.replace(fh.name, path)  # whole or not at all, whoever writes it at the same time
    except OSError:
        pass  # a read-only home: every process tokenises again
    return tokens


def _tokenise() -> torch.Tensor:
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
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
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
        return {"input_ids": window, "labels": window}, self.tokens[s + 1:s + CONTEXT + 1]


def datasets():
    tokens = _tokens()
    split = int(0.9 * len(tokens))  # the validation text comes after the training text
    g = torch.Generator().manual_seed(0)
    train = torch.randint(0, split - CONTEXT - 1, (TRAIN_WINDOWS,), generator=g)
    val = torch.randint(split, len(tokens) - CONTEXT - 1, (VAL_WINDOWS,), generator=g)
    return Windows(tokens, train), Windows(tokens, val)


def model():
    if TINY:
        config = GPT2Config(vocab_size=TOKENIZER_VOCAB, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4,
                            bos_token_id=0, eos_token_id=0)
    else:
        config = GPT2Config(n_positions=CONTEXT, n_embd=768, n_layer=12, n_head=12, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=6e-4, weight_decay=0.1)
