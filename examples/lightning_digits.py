"""A Lightning workload as Lightning users write it: a LightningModule and a
LightningDataModule on scikit-learn's bundled 8x8 digits (no download), with a torchmetrics
accuracy logged in validation_step and a OneCycle schedule stepped every optimizer step.

    advisor tune examples/lightning_digits.py

No model() or datasets(): advisor finds the LightningModule and the LightningDataModule
defined here, takes the baseline's batch size from train_dataloader(), and compares
configurations on the value named in METRIC (what validation_step logs).
"""

import lightning as L
import torch
import torchmetrics
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# Which of the values validation_step logs is the metric, and which way is better.
METRIC = {"name": "val_acc", "higher_is_better": True, "fraction": True}


class DigitsClassifier(L.LightningModule):
    def __init__(self, lr: float = 3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4), nn.Flatten(),
            nn.Linear(32 * 16, 64), nn.ReLU(),
            nn.Linear(64, 10),
        )
        self.val_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=10, average="micro")

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.val_acc(logits, y)
        self.log("val_acc", self.val_acc)  # a Metric: computed over the whole epoch

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=self.hparams.lr, total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class DigitsData(L.LightningDataModule):
    def __init__(self, batch_size: int = 64):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        digits = load_digits()
        x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
        y = torch.tensor(digits.target, dtype=torch.long)
        split = int(0.8 * len(x))
        self.train_set = TensorDataset(x[:split], y[:split])
        self.val_set = TensorDataset(x[split:], y[split:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)


if __name__ == "__main__":  # the same module and data under Lightning's own Trainer
    L.Trainer(max_epochs=5, accelerator="cpu").fit(DigitsClassifier(), DigitsData())
