"""The default strategy's seed trials: the baseline with one knob changed, in priority
order, run first (checked in a study replayed from the recorded grid)."""

from __future__ import annotations

import sys

from advisor.core.config import TrialConfig
from advisor.search.one_knob import seed_configs, seed_count
from advisor.search.space import load_space
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run.plan import plan_study
from advisor.study.run.tuner import Tuner

from conftest import EXAMPLES, REPO

sys.path.insert(0, str(REPO / "benchmarks"))
GRID_SPACE = str(REPO / "benchmarks" / "data" / "grid_cpu.yaml")


def test_one_knob_each_first_then_the_rest():
    seeds = seed_configs(load_space(GRID_SPACE), TrialConfig(), 8)
    assert [c.describe() for c in seeds] == [
        "bs=64 bf16", "bs=64 fp32 channels_last", "bs=128 fp32", "bs=64 fp32 grad_accumulation=2",
        "bs=64 fp32 activation_checkpointing", "bs=64 fp32 l1_unstructured:0.5", "bs=32 fp32", "bs=256 fp32"]
    base = TrialConfig()
    assert all(sum(a != b for a, b in zip(c.to_dict().values(), base.to_dict().values())) == 1 for c in seeds)


def test_values_for_the_other_workload_are_left_out():
    space = load_space("inference")
    train = seed_configs(space, TrialConfig(batch_size=256), 20, "train")
    assert not any(c.quantization == "int8_dynamic" or c.precision == "bf16_full" for c in train)
    inference = seed_configs(space, TrialConfig(batch_size=256), 20, "inference")
    assert any(c.quantization == "int8_dynamic" for c in inference)


def test_seed_count_is_a_third_between_3_and_5():
    assert [seed_count(n) for n in (1, 9, 12, 15, 20, 40)] == [3, 3, 4, 5, 5, 5]


def test_a_default_study_runs_the_seeds_right_after_the_baseline(tmp_path):
    from replay import Grid, ReplayExecutor

    grid = Grid.load(REPO / "benchmarks" / "data" / "grid_digits_cnn_cpu.json")
    options = TuneOptions(workload_path=str(EXAMPLES / "digits_cnn.py"), space=GRID_SPACE, trials=12,
                          storage=f"sqlite:///{tmp_path / 's.db'}", train_samples=100, confirm=False,
                          metric_seeds=1)
    plan = plan_study(options)
    study = Tuner(plan, executor=ReplayExecutor(grid)).run().study
    configs = [TrialConfig.from_dict(t.user_attrs["config"]) for t in sorted(study.trials, key=lambda t: t.number)
               if "duplicate_of" not in t.user_attrs]
    assert configs[0] == TrialConfig()
    assert configs[1:5] == seed_configs(plan.space, TrialConfig(), seed_count(12))


def test_a_seed_changes_only_its_knob_in_a_space_with_more_knobs(tmp_path, ray_session):
    """In the default space the baseline's threads (None, "torch's default") is not among
    the choices: a seed trial must keep it rather than have it sampled."""
    import optuna

    space = tmp_path / "threads.yaml"
    space.write_text("batch_size: {choices: [32, 64]}\nprecision: {choices: [fp32, bf16]}\nthreads: {choices: [1, 2]}\n")
    options = TuneOptions(workload_path=str(EXAMPLES / "digits_mlp.py"), space=str(space), trials=4,
                          storage=f"sqlite:///{tmp_path / 's.db'}", train_samples=100, confirm=False,
                          metric_seeds=1)
    plan = plan_study(options)
    Tuner(plan).run()
    study = optuna.load_study(study_name=plan.study_name, storage=options.storage)
    base = plan.baseline
    assert base.threads is None
    seeds = [t for t in study.trials if "seed_config" in t.user_attrs]
    assert len(seeds) == 3
    for t in seeds:
            config = TrialConfig.from_dict(t.user_attrs["config"])
            assert config == TrialConfig.from_dict(t.user_attrs["seed_config"])
            assert sum(a != b for a, b in zip(config.to_dict().values(), base.to_dict().values())) == 1


def test_a_seed_brings_the_knobs_it_makes_active_with_it():
    """The seed parallelism=pp changes one knob; devices (and the pipeline's own knobs) come
    into play with it at their first choice, not the baseline's single device (which no
    parallel strategy can run: the seed would burn a trial)."""
    space = load_space("parallel")
    seeds = {c.parallelism: c for c in seed_configs(space, TrialConfig(batch_size=64), 20)}
    assert {"ddp", "fsdp", "tp", "pp", "fsdp_tp"} <= set(seeds)
    assert seeds["pp"].devices == 2 and seeds["pp"].pp_microbatches is None and seeds["ddp"].devices == 2
    assert (seeds["fsdp_tp"].devices, seeds["fsdp_tp"].tp_size) == (4, 2)  # the first pair that makes a 2-D mesh
