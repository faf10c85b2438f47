"""A Lightning file's pieces as advisor's trial loop calls them (``LightningRun``): the
DataModule's data, the LightningModule in its step, configure_optimizers and its
schedulers stepped as Lightning steps them, and a validation epoch for the metric. Found
and bound by ``advisor.workload.lightning``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from advisor.core.errors import WorkloadError
from advisor.workload.stream import check_stream, first_items, is_stream
from advisor.workload.user_code import user_code

if TYPE_CHECKING:
    from advisor.workload.lightning_step import TrialTrainer

# Hooks a LightningModule may override that advisor's loop does not call (docs/workloads.md says so).
NOT_CALLED = ("optimizer_step", "optimizer_zero_grad", "on_before_backward", "on_after_backward",
              "on_before_optimizer_step", "on_train_batch_start", "on_train_batch_end", "on_train_start",
              "on_train_epoch_start", "configure_gradient_clipping", "backward", "configure_callbacks")


class LightningRun:
    """A Lightning file's pieces as the trial loop calls them, and the state of one
    trial's run (this process builds one module and one optimizer)."""

    def __init__(self, path: str, baseline: dict[str, Any], parts: dict[str, Any]) -> None:
        """``parts``: make_module / module_name, make_data / data_name (a factory and what the
        file calls it), module_bases / data_bases (Lightning's classes, of either package)."""
        self.path = path
        self.make_module, self.module_name = parts["make_module"], parts["module_name"]
        self.make_data, self.data_name = parts["make_data"], parts["data_name"]
        self.module_bases, self.data_bases = parts["module_bases"], parts["data_bases"]
        self.baseline = baseline
        self.logs: Any = None
        self.lit: Any = None
        self.step: Any = None  # the LightningStep around it
        self.datamodule: Any = None
        self.train_size: int | None = 0  # None: the training data is a stream
        self.trainer: TrialTrainer | None = None
        self.schedulers: list[Any] = []
        self.steps_in_epoch = 0
        self.class_name = self.module_name.rstrip("()")
        self.metric_name = ""
        self.metric_how = ""  # how the metric was inferred ("" when METRIC names it)

    def names(self) -> dict[str, str]:
        """What each contract role is in this file (for messages)."""
        step = self.class_name
        return {"model": self.module_name, "datasets": f"{self.data_name.rstrip('()')}'s dataloaders",
                "loss": f"{step}.training_step()", "metric": f"{step}.validation_step()",
                "optimizer": f"{step}.configure_optimizers()", "datamodule": self.data_name}

    # --- the data
    def datasets(self) -> tuple[Any, Any]:
        where = f"{self.path}: {self.data_name}"
        with user_code(where):
            dm = self.make_data()
        if not isinstance(dm, self.data_bases):
            raise WorkloadError(f"{where} must give a LightningDataModule, found {type(dm).__name__}")
        name = type(dm).__name__
        with user_code(f"{self.path}: {name}.prepare_data()"):
            dm.prepare_data()
        with user_code(f"{self.path}: {name}.setup('fit')"):
            dm.setup("fit")
        train, train_loader = self._dataset(dm, "train_dataloader")
        val, _ = self._dataset(dm, "val_dataloader")
        self.datamodule, self.train_size = dm, None if is_stream(train) else len(train)
        self._collate = _Collate(train_loader.collate_fn)
        if getattr(train_loader, "batch_size", None):
            self.baseline.setdefault("batch_size", train_loader.batch_size)
        return train, val

    def _dataset(self, dm: Any, method: str) -> tuple[Any, Any]:
        from torch.utils.data import DataLoader

        where = f"{self.path}: {type(dm).__name__}.{method}()"
        with user_code(where):
            loader = getattr(dm, method)()
        if not isinstance(loader, DataLoader):
            raise WorkloadError(f"{where} must return one DataLoader (advisor re-batches its dataset for each "
                                f"configuration), found {type(loader).__name__}")
        data = loader.dataset
        if is_stream(data) and method == "train_dataloader":  # read as a stream (advisor.workload.stream)
            check_stream(data, where, "training")
            if not first_items(data, 1, f"{where}: its dataset, a stream started with iter(),"):
                raise WorkloadError(f"{where}: its dataset is a stream ({type(data).__name__}) that yielded nothing: "
                                    "its first pass (iter()) ended before one item")
            return data, loader
        if is_stream(data):
            raise WorkloadError(f"{where}: its dataset must be map-style (with __len__ and __getitem__), found a "
                                f"stream ({type(data).__name__}): every evaluation reads all of it, the same items "
                                "for every trial. The training data may be a stream; keep the validation items "
                                "instead (list(stream) is a map-style set of them)")
        if not hasattr(data, "__len__") or not hasattr(data, "__getitem__"):
            raise WorkloadError(f"{where}: its dataset must be map-style (with __len__ and __getitem__) so that "
                                f"trials can batch and shard it; found {type(data).__name__}")
        if len(data) == 0:
            raise WorkloadError(f"{where}: its dataset is empty")
        return data, loader

    _collate: Any = None

    def collate(self, items: list[Any]) -> Any:
        return self._collate(items)

    # --- the model
    def model(self) -> Any:
        from advisor.workload.lightning_step import Logs, lightning_step

        where = f"{self.path}: {self.module_name}"
        with user_code(where):
            lit = self.make_module()
        if not isinstance(lit, self.module_bases):
            raise WorkloadError(f"{where} must give a LightningModule, found {type(lit).__name__}")
        base = next(b for b in self.module_bases if isinstance(lit, b))
        missing = [m for m in ("training_step", "validation_step", "configure_optimizers")
                   if getattr(type(lit), m) is getattr(base, m)]
        if missing:
            why = {"training_step": "it gives the loss", "validation_step": "it logs the metric",
                   "configure_optimizers": "it gives the optimizer"}
            raise WorkloadError(f"{self.path}: {type(lit).__name__} has no "
                                + ", ".join(f"{m} ({why[m]})" for m in missing))
        if not lit.automatic_optimization:
            raise WorkloadError(f"{self.path}: {type(lit).__name__} uses manual optimization "
                                "(automatic_optimization = False); advisor's trials drive automatic optimization only")
        if type(lit).configure_model is not base.configure_model:
            with user_code(f"{self.path}: {type(lit).__name__}.configure_model()"):
                lit.configure_model()
        self.logs = Logs()
        for part in lit.modules():  # self.log in every LightningModule inside it
            if isinstance(part, self.module_bases):
                part.log, part.log_dict = self.logs.log, self.logs.log_dict
        self.lit = lit
        self.step = lightning_step(lit, self.logs)
        return self.step

    def notes(self, step: Any) -> list[str]:
        """What the preflight says of the file: what runs, and the hooks it overrides that
        advisor's loop does not call."""
        lit = step.lit
        base = next(b for b in self.module_bases if isinstance(lit, b))
        lines = [(f"Lightning: {type(lit).__name__} (training_step, validation_step logging "
                  f"{self.metric_name!r}, configure_optimizers) on {type(self.datamodule).__name__}'s dataloaders")]
        if self.metric_how:
            lines.append(f"Lightning: the file has no METRIC; the study's metric is {self.metric_name!r}: "
                         f"{self.metric_how}")
        skipped = [h for h in NOT_CALLED if getattr(type(lit), h, None) is not getattr(base, h, None)]
        if skipped:
            lines.append(f"Lightning: {type(lit).__name__} overrides {', '.join(skipped)}, which advisor's trial loop "
                         "does not call (docs/workloads.md: Lightning files): trials measure the module without them")
        return lines

    def start_trial(self, *, batch_size: int, accumulation: int, rank: int, world: int, precision: str,
                    train_samples: int) -> None:
        """Attach the trial's trainer (once the knobs are applied, before configure_optimizers)."""
        from advisor.workload.lightning_step import LIGHTNING_PRECISION, TrialTrainer

        steps = max(1, round(train_samples / batch_size))
        self.trainer = TrialTrainer(steps=steps, train_size=self.train_size, batch_size=batch_size,
                                    accumulation=accumulation, rank=rank, world=world,
                                    precision=LIGHTNING_PRECISION.get(precision, precision), datamodule=self.datamodule)
        self.lit.trainer = self.trainer

    # --- the step
    def loss(self, output: Any, target: Any) -> Any:
        value = output.get("loss") if isinstance(output, dict) else output
        if value is None:
            raise WorkloadError(f"{self.path}: {self.class_name}.training_step returned "
                                f"{'a dict without loss' if isinstance(output, dict) else 'None'}; advisor trains "
                                "every batch (return the loss, or a dict with 'loss')")
        return value

    def metric(self, output: Any, target: Any) -> float:
        raise RuntimeError("a Lightning workload's metric is what validation_step logs: use validate()")

    def optimizer(self, parameters: Any) -> Any:
        """configure_optimizers() on the module as the knobs left it, parsed by Lightning;
        its schedulers step after optimizer steps and at epoch ends (``epoch_end``)."""
        try:
            from lightning.pytorch.core.optimizer import _configure_optimizers, _configure_schedulers_automatic_opt
        except ImportError:  # only pytorch_lightning installed
            from pytorch_lightning.core.optimizer import _configure_optimizers, _configure_schedulers_automatic_opt
        where = f"{self.path}: {self.class_name}.configure_optimizers()"
        with user_code(where):
            conf = self.lit.configure_optimizers()
            optimizers, schedulers, monitor = _configure_optimizers(conf)
            configs = _configure_schedulers_automatic_opt(schedulers, monitor)
        if len(optimizers) != 1:
            raise WorkloadError(f"{where} gave {len(optimizers)} optimizers; advisor tunes modules with one "
                                "(several need manual optimization)")
        optimizer = optimizers[0]
        self.schedulers = configs
        self.logs.kept = {c.monitor for c in configs if c.reduce_on_plateau and c.monitor}
        if self.trainer is not None:
            self.trainer.optimizers, self.trainer.lr_scheduler_configs = [optimizer], configs
        optimizer.register_step_post_hook(self._stepped)
        return optimizer

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """After an optimizer step: step-interval schedulers, as Lightning's loop counts
        them (the dataloader batch index within the epoch, plus one, a multiple of
        ``frequency``; with accumulation a step ends every ``accumulation`` batches)."""
        trainer = self.trainer
        if trainer is None:
            return
        trainer.global_step += 1
        self.steps_in_epoch += 1
        if trainer.global_step > trainer.max_steps:  # timing steps past the budget: the schedule has ended
            return
        index = self.steps_in_epoch * trainer.accumulate_grad_batches
        for config in self.schedulers:
            if config.interval == "step" and not config.reduce_on_plateau and index % config.frequency == 0:
                self.lit.lr_scheduler_step(config.scheduler, None)

    def epoch_end(self, epoch: int) -> None:
        """The end of training epoch ``epoch`` (0-based; before the next one's first batch),
        in Lightning's order: epoch-interval schedulers, on_train_epoch_end, then
        ReduceLROnPlateau on its monitor (when training logs it; else not stepped)."""
        trainer = self.trainer
        self.steps_in_epoch = self.step.train_index = 0  # batch_idx counts within an epoch
        values = self.logs.end()
        due = [] if trainer is None or trainer.global_step > trainer.max_steps else [
            c for c in self.schedulers if c.interval == "epoch" and (epoch + 1) % c.frequency == 0]
        for config in due:
            if not config.reduce_on_plateau:
                self.lit.lr_scheduler_step(config.scheduler, None)
        self.lit.on_train_epoch_end()
        if trainer is not None:
            trainer.callback_metrics.update(values)
            trainer.current_epoch = epoch + 1
        for config in due:
            if config.reduce_on_plateau and config.monitor in values:
                self.lit.lr_scheduler_step(config.scheduler, values[config.monitor])

    # --- the metric
    def validate(self, predict: Callable[[Any], Any], batches: Any, name: str) -> float:
        """One validation epoch as Lightning runs it; the value ``name`` logged."""
        import torch

        lit, logs = self.lit, self.logs
        logs.start("val")
        self.step.val_index = 0
        lit.on_validation_epoch_start()
        for inputs, target in batches:
            logs.batch_size = len(target)
            predict(inputs)
        logs.batch_size = 1
        lit.on_validation_epoch_end()
        values = logs.end()
        logs.start("train")
        if self.trainer is not None:
            self.trainer.callback_metrics.update(values)
        if name not in values:
            raise WorkloadError(f"{self.path}: {self.class_name}.validation_step did not log {name!r} "
                                f"(METRIC['name']); it logged: {', '.join(sorted(values)) or 'nothing'}")
        value = values[name]
        return float(value.item() if isinstance(value, torch.Tensor) else value)


class _Collate:
    """The user's collate function, its batch given to the step as the model's one input
    (the target: a placeholder of the batch's length, for weighting and splitting)."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> tuple[Any, Any]:
        import torch

        return (self.collate(items),), torch.zeros(len(items))
