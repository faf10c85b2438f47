"""advisor/search/space.py and the shipped presets: load, validate, filter, sample.

Hardware sets in the filtering tests are DECLARED (built by hand), not detected: the
GPUs they name do not exist on the machines these tests run on.
"""

from __future__ import annotations

import collections
import json

import optuna
import pytest

from advisor import search_spaces
from advisor.core.config import TrialConfig
from advisor.core.errors import AdvisorError, SpaceError
from advisor.machine.hardware import CpuInfo, GpuInfo, Hardware
from advisor.search.space import Knob, SearchSpace, filter_space, load_space, parse_space

GiB = 1 << 30


# ---- declared hardware (no such devices here) ----------------------------------------

def cpu_node(flags: frozenset[str] = frozenset({"avx2"}), cores: int = 8, compiler: str | None = "/usr/bin/c++") -> Hardware:
    return Hardware(cpu=CpuInfo("declared CPU", cores, flags), compiler=compiler)


def gpu_node(name: str, capability: tuple[int, int]) -> Hardware:
    return Hardware(cpu=CpuInfo("declared CPU", 16, frozenset({"avx2"})),
                    gpus=(GpuInfo(0, name, capability, 40 * GiB),), triton=True, compiler="/usr/bin/c++")


def write(tmp_path, text: str, name: str = "space.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def space_of(text: str):
    import yaml

    return parse_space(yaml.safe_load(text), "test", "<test>")


def choices(space: SearchSpace, name: str) -> tuple:
    return next(k.choices for k in space.knobs if k.name == name)


def dropped(space: SearchSpace, name: str) -> dict:
    return {d.value: d.reason for d in space.dropped if d.knob == name}


# ---- loading and validation -----------------------------------------------------------

@pytest.mark.parametrize("name", search_spaces.names())
def test_every_shipped_preset_loads_and_validates(name):
    space = load_space(name)
    assert space.name == name
    assert space.knobs, f"preset {name} has no knobs"
    # Its points are valid TrialConfigs (re-validated through from_dict): every point where
    # listing is cheap, and there size() counts exactly what configs() lists; 200 drawn
    # across the whole space (the search's own define-by-run sampling) where it is not.
    configs = space.configs(limit=20_000)
    if len(configs) < 20_000:
        assert len(configs) == space.size() > 0
    else:
        assert space.size() > 20_000
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        configs = [space.sample(study.ask()) for _ in range(200)]
        assert len({json.dumps(c.to_dict(), sort_keys=True) for c in configs}) > 150  # spread, not one corner
    for cfg in configs:
        assert TrialConfig.from_dict(cfg.to_dict()) == cfg
    # The header comment says which command uses the file.
    text = search_spaces.read(name)
    assert text.startswith("#") and "advisor tune" in text.split("\n\n")[0]


def test_presets_include_default_and_eager():
    assert {"default", "eager"} <= set(search_spaces.names())
    assert search_spaces.read("no-such-preset") is None


def test_default_preset_shape():
    space = load_space("default")
    assert choices(space, "batch_size") == (16, 32, 64, 128, 256, 512)
    assert set(choices(space, "precision")) == {"fp32", "tf32", "bf16", "fp16"}
    # The default lists every knob; the capability filter adapts it to the machine.
    assert {k.name for k in space.knobs} == set(TrialConfig.keys())
    eager = load_space("eager")
    # 6 batch sizes x 4 precisions x 7 thread counts x 2 layouts
    assert eager.size() == len(eager.configs()) == 6 * 4 * 7 * 2


def test_eager_preset_never_compiles():
    space = load_space("eager")
    assert choices(space, "compile") == (False,)
    assert all(not c.compile for c in space.configs())


def test_all_problems_reported_at_once(tmp_path):
    path = write(tmp_path, """
foo: {choices: [1, 2]}
compile: {choices: [false, true], bogus: 1}
channels_last: {choices: []}
batch_size: {low: 64, high: 16}
threads: {low: 5, high: 7}
precision: {choices: [fp64]}
compile_mode: {choices: [default], when: {nonsense: 1}}
""")
    with pytest.raises(SpaceError) as info:
        load_space(path)
    err = info.value
    assert err.source == path
    problems = err.problems
    expected = {
        "unknown knob": lambda p: p.startswith("foo:") and "unknown knob" in p,
        "unknown field": lambda p: p.startswith("compile:") and "bogus" in p,
        "empty choices": lambda p: p.startswith("channels_last.choices") and "empty" in p,
        "low > high": lambda p: p.startswith("batch_size") and "greater than" in p,
        "no power of two": lambda p: p.startswith("threads") and "no power of two" in p,
        "wrong value": lambda p: p.startswith("precision.choices: expected one of") and "fp64" in p,
        "unknown when": lambda p: p.startswith("compile_mode.when") and "nonsense" in p,
    }
    missing = [label for label, match in expected.items() if not any(match(p) for p in problems)]
    assert not missing, f"not reported: {missing}; got {problems}"
    assert len(problems) == len(expected)
    # The message the CLI prints lists every problem, and names the file.
    assert path in str(err)
    assert all(p in str(err) for p in problems)
    assert isinstance(err, AdvisorError) and err.exit_code == 2


def test_a_misspelt_knob_is_named_with_the_closest_one(tmp_path):
    path = write(tmp_path, "precison: bf16\nbatch_size: {choices: [0, 32]}\n")
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert info.value.problems == [
        f"precison: unknown knob (did you mean 'precision'? known: {', '.join(TrialConfig.keys())})",
        "batch_size.choices: expected a positive integer, found 0"]


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert "no such file" in info.value.problems[0]
    assert "default" in info.value.problems[0]  # lists the presets the user could mean


def test_unknown_preset_name_lists_presets():
    with pytest.raises(SpaceError) as info:
        load_space("no-such-preset")
    assert "not a shipped preset" in info.value.problems[0]
    assert "eager" in info.value.problems[0]


def test_not_yaml(tmp_path):
    with pytest.raises(SpaceError) as info:
        load_space(write(tmp_path, "a: [b"))
    assert len(info.value.problems) == 1
    assert "not valid YAML" in info.value.problems[0]


def test_empty_file(tmp_path):
    with pytest.raises(SpaceError) as info:
        load_space(write(tmp_path, ""))
    assert "empty file" in info.value.problems[0]


def test_top_level_list_rejected(tmp_path):
    with pytest.raises(SpaceError) as info:
        load_space(write(tmp_path, "- batch_size\n- precision\n"))
    assert "expected a mapping" in info.value.problems[0]
    assert "list" in info.value.problems[0]


def test_fixed_scalar_shorthand(tmp_path):
    space = load_space(write(tmp_path, "compile: false\nbatch_size: 128\nprecision: bf16\n", "fixed.yaml"))
    assert space.name == "fixed"
    assert choices(space, "compile") == (False,)
    assert space.size() == 1
    (only,) = space.configs()
    assert only == TrialConfig(batch_size=128, precision="bf16", compile=False)


def test_fixed_shorthand_is_validated(tmp_path):
    with pytest.raises(SpaceError) as info:
        load_space(write(tmp_path, "compile: maybe\n"))
    assert info.value.problems and info.value.problems[0].startswith("compile")


def test_range_expands_to_powers_of_two():
    space = space_of("batch_size: {low: 20, high: 300}\nthreads: {low: 1, high: 4}")
    assert choices(space, "batch_size") == (32, 64, 128, 256)
    assert choices(space, "threads") == (1, 2, 4)


def test_range_only_for_integer_knobs_and_not_with_choices():
    with pytest.raises(SpaceError) as info:
        space_of("precision: {low: 1, high: 4}\nbatch_size: {choices: [32], low: 16, high: 64}")
    problems = info.value.problems
    assert any(p.startswith("precision") and "use choices" in p for p in problems)
    assert any(p.startswith("batch_size") and "not both" in p for p in problems)


def test_bool_is_not_an_integer_range_bound():
    with pytest.raises(SpaceError) as info:
        space_of("batch_size: {low: true, high: 64}")
    assert "batch_size.low" in info.value.problems[0]


def test_duplicate_choices_rejected():
    with pytest.raises(SpaceError) as info:
        space_of("precision: {choices: [bf16, bf16]}")
    assert "duplicate" in info.value.problems[0]


def test_when_must_name_a_knob_of_the_space_with_a_valid_value():
    with pytest.raises(SpaceError) as info:
        space_of("""
compile_mode: {choices: [default], when: {compile: true}}
channels_last: {choices: [true], when: {precision: fp64}}
precision: {choices: [fp32], when: {precision: fp32}}
""")
    problems = info.value.problems
    assert any("compile_mode.when" in p and "not a knob of this space" in p for p in problems)
    assert any("channels_last.when" in p and "fp64" in p for p in problems)
    assert any("precision.when" in p and "itself" in p for p in problems)


def test_a_when_value_the_other_knobs_choices_never_take_is_said_as_such_not_blamed_on_the_machine():
    """A review's `compile_mode: {when: {compile: true}}` beside `compile: {choices: [false]}`
    was refused later as "only used when compile is True, which cannot run here"."""
    with pytest.raises(SpaceError) as info:
        space_of("compile: {choices: [false]}\n"
                 "compile_mode: {choices: [default, max-autotune], when: {compile: true}}\n"
                 "batch_size: {choices: [32, 64]}\n"
                 "precision: {choices: [fp32, bf16], when: {batch_size: [128, 256]}}\n"
                 "channels_last: {choices: [false, true], when: {batch_size: [64, 256]}}")
    assert info.value.problems == [
        "compile_mode.when: compile is True, which compile's choices [False] never take: compile_mode would never "
        "be tried",
        "precision.when: batch_size is [128, 256], which batch_size's choices [32, 64] never take: precision would "
        "never be tried"]  # channels_last: 64 is a choice, so it stands


def test_conditional_knob_sampled_after_the_knob_it_depends_on():
    space = space_of("compile_mode: {choices: [default, max-autotune], when: {compile: true}}\n"
                     "compile: {choices: [false, true]}")
    assert [k.name for k in space.knobs] == ["compile", "compile_mode"]
    configs = space.configs()
    # compile false -> one point with the default mode; compile true -> each mode.
    assert sorted((c.compile, c.compile_mode) for c in configs) == [
        (False, "default"), (True, "default"), (True, "max-autotune")]


def test_configs_respects_limit():
    space = load_space("default")
    assert len(space.configs(limit=10)) == 10


def test_to_dict_round_trips_through_parse_space():
    space = load_space("default")
    again = parse_space(space.to_dict(), "again", "<dict>")
    assert again.knobs == space.knobs


# ---- define-by-run sampling with a real Optuna study ----------------------------------

def new_study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(directions=["maximize", "minimize", "maximize"],
                               sampler=optuna.samplers.RandomSampler(seed=0))


def test_compile_mode_suggested_only_when_compile_is_true():
    space = load_space("default")
    study = new_study()
    seen = collections.Counter()
    for _ in range(30):
        trial = study.ask()
        cfg = space.sample(trial)
        assert trial.params["compile"] == cfg.compile
        if cfg.compile:
            assert "compile_mode" in trial.params
            assert cfg.compile_mode == trial.params["compile_mode"]
        else:
            assert "compile_mode" not in trial.params
            assert cfg.compile_mode == "default"
        seen[cfg.compile] += 1
    assert seen[True] > 0 and seen[False] > 0, seen


def test_sampled_values_lie_in_the_space():
    space = space_of("batch_size: {low: 16, high: 64}\nprecision: {choices: [fp32, bf16]}")
    study = new_study()
    for _ in range(15):
        trial = study.ask()
        cfg = space.sample(trial)
        assert cfg.batch_size in (16, 32, 64)
        assert cfg.precision in ("fp32", "bf16")
        assert set(trial.params) == {"batch_size", "precision"}
        # Knobs not in the space keep TrialConfig's defaults.
        assert (cfg.threads, cfg.channels_last, cfg.compile) == (None, False, False)


def test_baseline_sampled_as_given_even_outside_the_space():
    space = load_space("default")
    base = TrialConfig(batch_size=100, precision="bf16", channels_last=True)
    params = space.enqueue_params(base)
    assert "batch_size" not in params  # 100 is not a power of two in [16, 512]
    assert params["precision"] == "bf16" and params["channels_last"] is True
    assert "compile_mode" not in params  # inactive: compile is false in the baseline
    study = new_study()
    study.enqueue_trial(params)
    trial = study.ask()
    cfg = space.sample(trial, base=base)
    assert cfg == base
    assert "batch_size" not in trial.params


def test_baseline_with_compile_enqueues_its_mode():
    space = load_space("default")
    base = TrialConfig(compile=True, compile_mode="max-autotune-no-cudagraphs")
    study = new_study()
    study.enqueue_trial(space.enqueue_params(base))
    trial = study.ask()
    assert space.sample(trial, base=base) == base
    assert trial.params["compile_mode"] == "max-autotune-no-cudagraphs"


# ---- capability filtering on declared hardware ----------------------------------------

SPACE_NO_THREADS = """
precision: {choices: [fp32, tf32, bf16, fp16]}
compile: {choices: [false, true]}
compile_mode: {choices: [default, max-autotune-no-cudagraphs, reduce-overhead], when: {compile: true}}
"""


def test_a100_keeps_every_precision():
    """The A100 is DECLARED (Hardware built by hand), not a real GPU."""
    filtered = filter_space(space_of(SPACE_NO_THREADS), gpu_node("NVIDIA A100", (8, 0)))
    assert choices(filtered, "precision") == ("fp32", "tf32", "bf16", "fp16")
    assert "reduce-overhead" in choices(filtered, "compile_mode")  # CUDA graphs exist on a GPU
    assert not dropped(filtered, "precision")


def test_a100_default_preset_drops_threads():
    """The A100 is DECLARED (Hardware built by hand), not a real GPU.

    On a GPU node the thread count is not tuned: every threads value is dropped with a
    reason, trials keep torch's default, and the rest of the space survives.
    """
    filtered = filter_space(load_space("default"), gpu_node("NVIDIA A100", (8, 0)))
    assert set(choices(filtered, "precision")) == {"fp32", "tf32", "bf16", "fp16"}
    reasons = dropped(filtered, "threads")
    assert set(reasons) == {1, 2, 4, 8, 16, 32, 64}
    assert all("GPU" in r for r in reasons.values())
    assert all(c.threads is None for c in filtered.configs())


def test_t4_drops_tf32_and_bf16():
    """The T4 is DECLARED (Hardware built by hand), not a real GPU."""
    filtered = filter_space(space_of(SPACE_NO_THREADS), gpu_node("Tesla T4", (7, 5)))
    assert choices(filtered, "precision") == ("fp32", "fp16")
    reasons = dropped(filtered, "precision")
    assert set(reasons) == {"tf32", "bf16"}
    for reason in reasons.values():
        assert "compute capability" in reason and "8.0" in reason
        assert "Tesla T4" in reason and "7.5" in reason


def test_mixed_gpu_node_filters_by_its_weakest_gpu():
    """Both GPUs are DECLARED (Hardware built by hand), not real."""
    hw = Hardware(cpu=CpuInfo("declared", 16), triton=True, compiler="c++",
                  gpus=(GpuInfo(0, "NVIDIA A100", (8, 0), 40 * GiB), GpuInfo(1, "Tesla T4", (7, 5), 16 * GiB)))
    filtered = filter_space(space_of("precision: {choices: [fp32, bf16]}"), hw)
    assert choices(filtered, "precision") == ("fp32",)


def test_cpu_without_native_bf16_or_fp16_drops_them():
    """A DECLARED CPU (flags given by hand) with no bf16/fp16 instructions."""
    filtered = filter_space(space_of("precision: {choices: [fp32, tf32, bf16, fp16]}"),
                            cpu_node(frozenset({"avx2", "avx512f"})))
    assert choices(filtered, "precision") == ("fp32",)
    reasons = dropped(filtered, "precision")
    assert "avx512_bf16" in reasons["bf16"] and "amx_bf16" in reasons["bf16"]
    assert "avx512_fp16" in reasons["fp16"] or "amx_fp16" in reasons["fp16"]
    assert "GPU" in reasons["tf32"]


def test_cpu_with_amx_fp16_keeps_fp16():
    """A DECLARED CPU (flags given by hand) with AMX bf16 and fp16 units."""
    filtered = filter_space(space_of("precision: {choices: [fp32, bf16, fp16]}"),
                            cpu_node(frozenset({"amx_bf16", "amx_fp16"})))
    assert choices(filtered, "precision") == ("fp32", "bf16", "fp16")
    assert not filtered.dropped


def test_cpu_with_avx512_bf16_keeps_bf16_only():
    """A DECLARED CPU (flags given by hand) with avx512_bf16 but no fp16 arithmetic."""
    filtered = filter_space(space_of("precision: {choices: [fp32, bf16, fp16]}"),
                            cpu_node(frozenset({"avx512f", "avx512_bf16"})))
    assert choices(filtered, "precision") == ("fp32", "bf16")


def test_reduce_overhead_dropped_on_cpu():
    """A DECLARED CPU node (no GPU)."""
    filtered = filter_space(space_of(SPACE_NO_THREADS.replace("tf32, bf16, fp16", "")), cpu_node())
    assert choices(filtered, "compile_mode") == ("default", "max-autotune-no-cudagraphs")
    assert "CUDA" in dropped(filtered, "compile_mode")["reduce-overhead"]


def test_compile_dropped_on_cpu_without_compiler():
    """A DECLARED CPU node with no C++ compiler on PATH."""
    filtered = filter_space(space_of("compile: {choices: [false, true]}"), cpu_node(compiler=None))
    assert choices(filtered, "compile") == (False,)
    assert "compiler" in dropped(filtered, "compile")[True]


def test_threads_over_core_count_dropped():
    """A DECLARED 4-core CPU."""
    filtered = filter_space(space_of("threads: {choices: [1, 2, 4, 8, 16]}"), cpu_node(cores=4))
    assert choices(filtered, "threads") == (1, 2, 4)
    assert set(dropped(filtered, "threads")) == {8, 16}
    assert "4 cores" in dropped(filtered, "threads")[8]


def test_knob_with_no_option_left_is_an_error():
    """A DECLARED CPU node: TF32 needs an NVIDIA GPU, so nothing of this knob can run."""
    with pytest.raises(SpaceError) as info:
        filter_space(space_of("precision: {choices: [tf32]}"), cpu_node())
    (problem,) = info.value.problems
    assert problem.startswith("precision: no option can run")
    assert "tf32" in problem and "GPU" in problem


def test_batch_sizes_over_training_set_dropped():
    """A DECLARED CPU node; the training set size is given as max_batch_size."""
    filtered = filter_space(space_of("batch_size: {low: 16, high: 512}"), cpu_node(), {"train_size": 100})
    assert choices(filtered, "batch_size") == (16, 32, 64)
    reasons = dropped(filtered, "batch_size")
    assert set(reasons) == {128, 256, 512}
    assert all("larger than the training set" in r and "100" in r for r in reasons.values())


def test_channels_last_dropped_without_conv2d():
    """A DECLARED CPU node; has_conv2d comes from the workload's preflight."""
    space = space_of("channels_last: {choices: [false, true]}")
    assert choices(filter_space(space, cpu_node(), {"has_conv2d": True}), "channels_last") == (False, True)
    assert choices(filter_space(space, cpu_node()), "channels_last") == (False, True)  # unknown: kept
    filtered = filter_space(space, cpu_node(), {"has_conv2d": False})
    assert choices(filtered, "channels_last") == (False,)
    assert "convolution" in dropped(filtered, "channels_last")[True]


def test_filtering_shrinks_size_and_keeps_earlier_drops():
    """A DECLARED CPU node without bf16/fp16 units, filtered twice."""
    space = load_space("eager")
    once = filter_space(space, cpu_node(cores=2), {"train_size": 1000})
    assert once.size() < space.size()
    assert once.size() == 6 * 1 * 2 * 2  # batch 16..512, fp32 only, threads 1/2, both layouts
    twice = filter_space(once, cpu_node(cores=2), {"train_size": 50})
    assert set(once.dropped) <= set(twice.dropped)
    assert {d.value for d in twice.dropped if d.knob == "batch_size"} == {64, 128, 256, 512}


def test_sampling_a_filtered_space_never_yields_a_dropped_value():
    """A DECLARED CPU node without bf16/fp16 units."""
    filtered = filter_space(load_space("default"), cpu_node(cores=2))
    study = new_study()
    for _ in range(20):
        cfg = filtered.sample(study.ask())
        assert cfg.precision == "fp32"
        # threads is sampled for single-device trials; ranks split the cores themselves
        assert cfg.threads in ((1, 2) if cfg.parallelism == "single" else (None,))
        assert cfg.compile_mode != "reduce-overhead"


def test_knob_active():
    knob = Knob("compile_mode", ("default",), (("compile", True),))
    assert knob.active({"compile": True})
    assert not knob.active({"compile": False})
