"""apply(): turn a TrialConfig into a prepared model and training step.

Trials and users share this one code path, so an exported config reproduces exactly the
setup that was measured::

    prepared = advisor.apply(model, advisor.load_config("best.yaml"))
    optimizer = torch.optim.AdamW(prepared.module.parameters())
    for x, y in loader:                      # batch size: prepared.config.batch_size
        prepared.train_step(x, y, loss_fn, optimizer)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from advisor.config import TrialConfig
from advisor.workload import forward


@dataclass
class Prepared:
    """A model set up for one configuration.

    Attributes:
        model: what to call (the compiled wrapper when compile is on).
        module: the underlying ``nn.Module`` (parameters, state_dict, optimizer).
        device: where the model lives; inputs are moved there by ``to_device``.
        amp_dtype: autocast dtype, or None for no autocast.
        scaler: a GradScaler for fp16, else None.
        memory_format: ``torch.channels_last`` for 4-D inputs, else None.
    """

    model: Any
    module: Any
    device: Any
    config: TrialConfig
    amp_dtype: Any = None
    scaler: Any = None
    memory_format: Any = None
    compiled: bool = False

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The autocast region for forward + loss (a no-op for fp32 / tf32)."""
        import torch

        if self.amp_dtype is None:
            yield
        else:
            with torch.autocast(self.device.type, dtype=self.amp_dtype):
                yield

    def to_device(self, batch: Any) -> Any:
        """Move a (nested) batch to the device, 4-D tensors in the chosen memory format."""
        import torch

        if isinstance(batch, torch.Tensor):
            batch = batch.to(self.device, non_blocking=True)
            if self.memory_format is not None and batch.dim() == 4:
                batch = batch.contiguous(memory_format=self.memory_format)
            return batch
        if isinstance(batch, dict):
            return {k: self.to_device(v) for k, v in batch.items()}
        if isinstance(batch, (tuple, list)):
            return type(batch)(self.to_device(v) for v in batch)
        return batch

    def train_step(self, inputs: Any, target: Any, loss_fn: Callable[[Any, Any], Any], optimizer: Any) -> Any:
        """One optimisation step on a batch; returns the (detached) loss."""
        inputs, target = self.to_device(inputs), self.to_device(target)
        optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = loss_fn(forward(self.model, inputs), target)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()

    def predict(self, inputs: Any) -> Any:
        """Forward pass for evaluation (call under torch.inference_mode / no_grad)."""
        with self.autocast():
            return forward(self.model, self.to_device(inputs))

    def synchronize(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def default_device() -> Any:
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def apply(model: Any, config: TrialConfig | dict[str, Any], device: Any = None) -> Prepared:
    """Prepare ``model`` for ``config``: threads, precision, device, memory format, compile.

    Args:
        model: the user's ``nn.Module`` (moved to ``device`` in place).
        config: a TrialConfig, or a mapping of knob values (validated).
        device: defaults to the current CUDA device when there is one, else the CPU.

    Returns:
        A Prepared whose ``train_step`` / ``predict`` run the configured step.

    Raises:
        UnsupportedError: a technique refuses this model (e.g. channels_last without convs).
    """
    import torch

    from advisor.techniques import TECHNIQUES

    if not isinstance(config, TrialConfig):
        config = TrialConfig.from_dict(dict(config))
    device = torch.device(device) if device is not None else default_device()
    prepared = Prepared(model=model, module=model, device=device, config=config)
    values = config.to_dict()
    model.to(device)
    for key, technique in TECHNIQUES.items():  # ordered: threads, precision, ..., compile
        technique.apply(values[key], prepared)
    return prepared
