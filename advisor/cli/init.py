"""``advisor init``: write a commented model.py template."""

from __future__ import annotations

import argparse
from pathlib import Path

from advisor.core.errors import WorkloadError

NAME = "init"
HELP = "Write a commented model.py template."
EPILOG = """examples:
  advisor init model.py                              # a commented template to fill in
  advisor init lm.py --template transformers         # a transformers model (LOSS = "output.loss")
  advisor init lit.py --template lightning           # a LightningModule and a LightningDataModule"""


def add_arguments(i: argparse.ArgumentParser) -> None:
    i.add_argument("path", nargs="?", default="model.py")
    i.add_argument("--force", action="store_true", help="overwrite an existing file")
    i.add_argument("--template", default="plain", choices=("plain", "transformers", "lightning"),
                   help="plain (default): a PyTorch model and datasets; transformers: a Hugging Face model "
                        "built from a config, returning its own loss; lightning: a LightningModule and a "
                        "LightningDataModule, tuned as they are")


def run(args: argparse.Namespace) -> int:
    from advisor.workload.template import TEMPLATES

    path = Path(args.path)
    if path.exists() and not args.force:
        raise WorkloadError(f"{path} already exists (use --force to overwrite)")
    try:
        path.write_text(TEMPLATES[args.template])
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    what = "your LightningModule and DataModule" if args.template == "lightning" else "model() and datasets()"
    print(f"wrote {path}: fill in {what}, then run: advisor tune {path}")
    return 0
