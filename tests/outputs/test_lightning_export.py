"""A config in Lightning's terms: Trainer arguments where a knob has one, the DataLoader's
settings per device and accumulated batch, what advisor.apply() sets on the module, and
notes for what Lightning's loop needs done by hand."""

from __future__ import annotations

from advisor.core.config import TrialConfig
from advisor.outputs.lightning_export import lightning_arguments


def test_trainer_arguments_and_the_batch_per_device():
    args = lightning_arguments(TrialConfig(batch_size=256, precision="bf16", parallelism="ddp", devices=2,
                                           grad_accumulation=4, ddp_static_graph=False, sync_batchnorm=True,
                                           cudnn_benchmark=True, comm_hook="fp16", num_workers=2))
    trainer = args["trainer"]
    assert trainer["precision"] == "bf16-mixed" and trainer["accumulate_grad_batches"] == 4 and trainer["devices"] == 2
    assert trainer["sync_batchnorm"] is True and trainer["benchmark"] is True
    assert trainer["strategy"]["class"].endswith("DDPStrategy")
    assert trainer["strategy"]["ddp_comm_hook"].endswith("fp16_compress_hook")
    assert args["dataloader"] == {"batch_size": 32, "num_workers": 2, "pin_memory": False, "persistent_workers": True}
    assert args["advisor_apply"] == {}


def test_module_knobs_go_through_apply_and_step_knobs_are_notes():
    args = lightning_arguments(TrialConfig(pruning="ln_structured", channels_last=True, fused_optimizer=True,
                                           sdpa_backend="flash", parallelism="fsdp", devices=2,
                                           fsdp_mixed_precision="bf16", fsdp_reshard=False))
    assert args["advisor_apply"] == {"pruning": "ln_structured", "channels_last": True}
    notes = "\n".join(args["notes"])
    assert "fused=True" in notes and "FLASH_ATTENTION" in notes
    assert "MixedPrecisionPolicy" in notes and "reshard_after_forward=False" in notes
    assert args["trainer"]["strategy"]["class"].endswith("ModelParallelStrategy")


def test_a_2d_mesh_is_lightnings_model_parallel_strategy_with_both_sizes():
    args = lightning_arguments(TrialConfig(batch_size=64, parallelism="fsdp_tp", devices=8, tp_size=2))
    assert args["trainer"]["strategy"] == {"class": "lightning.pytorch.strategies.ModelParallelStrategy",
                                           "data_parallel_size": 4, "tensor_parallel_size": 2}
    assert args["dataloader"]["batch_size"] == 16  # 64 over the 4 FSDP groups: a TP group shares its batch
    assert args["advisor_apply"] == {}
    notes = "\n".join(args["notes"])
    assert "parallelize_module" in notes and "fully_shard" in notes
    tp = lightning_arguments(TrialConfig(batch_size=64, parallelism="tp", devices=2))
    assert tp["trainer"]["strategy"]["tensor_parallel_size"] == 2 and tp["dataloader"]["batch_size"] == 64
