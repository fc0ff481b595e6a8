"""The embedded model's dtype, chosen from the processor (issue 17): bf16 only where the CPU has native bf16, float32
elsewhere; ``VLLMEngine(dtype=...)`` / ``--dtype`` and ``$TOPOROUTE_DTYPE`` force either, in that order; bad values
are rejected naming the value; the choice and its reason reach run.json. No vLLM here: the processors are given
as flag sets, the engine as a scripted one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
from test_methods import MATH, team_engine

from toporoute import cli
from toporoute.errors import InvalidArgumentError
from toporoute.llm import cpu
from toporoute.llm.cpu import DTYPE_ENV, choose_dtype, resolve_dtype
from toporoute.tasks import write_tasks_jsonl


def _flags(text: str) -> list[str]:
    return text.split()


# /proc/cpuinfo flags of real processors (the ones that matter here, plus neighbours)
EPYC_AVX2 = _flags("fpu sse sse2 ssse3 sse4_1 sse4_2 fma avx f16c avx2 bmi1 bmi2 sha_ni vaes")  # Zen 2/3
SKYLAKE_X = EPYC_AVX2 + _flags("avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni")  # AVX-512, no bf16
ZEN4 = SKYLAKE_X + ["avx512_bf16"]
SAPPHIRE_RAPIDS = ZEN4 + _flags("avx512_fp16 amx_bf16 amx_tile amx_int8")
NEOVERSE_V1 = _flags("fp asimd aes pmull sha1 sha2 crc32 atomics sve bf16 i8mm")  # Arm Features


@pytest.mark.parametrize(
    ("flags", "dtype", "named"),
    [
        (EPYC_AVX2, "float32", "no avx512_bf16/amx_bf16"),
        (SKYLAKE_X, "float32", "no avx512_bf16/amx_bf16"),
        (ZEN4, "bfloat16", "(avx512_bf16)"),
        (SAPPHIRE_RAPIDS, "bfloat16", "(avx512_bf16, amx_bf16)"),
        (NEOVERSE_V1, "bfloat16", "(bf16)"),
        ([], "float32", "no avx512_bf16/amx_bf16"),
        (None, "float32", "could not be read"),
    ],
)
def test_auto_is_bf16_only_with_native_bf16(flags, dtype: str, named: str) -> None:
    for forced in (None, "auto"):
        got, reason = choose_dtype(flags, forced)
        assert got == dtype and reason.startswith(f"{dtype}: ") and named in reason, reason


def test_a_forced_dtype_wins_over_the_processor() -> None:
    assert choose_dtype(EPYC_AVX2, "bfloat16") == ("bfloat16", "bfloat16: forced")
    assert choose_dtype(SAPPHIRE_RAPIDS, "float32") == ("float32", "float32: forced")


@pytest.mark.parametrize("bad", ["bf16", "fp32", "float16", "half", "AUTO", ""])
def test_bad_values_are_rejected_naming_them(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"got {bad!r}") as err:
        choose_dtype(EPYC_AVX2, bad)
    assert "auto, bfloat16, float32" in str(err.value)
    with pytest.raises(InvalidArgumentError, match=f"dtype must be .* got {bad!r}"):
        resolve_dtype(bad, env={}, flags=EPYC_AVX2)


def test_option_then_environment_then_the_rule() -> None:
    avx2, amx = EPYC_AVX2, SAPPHIRE_RAPIDS
    # nothing forced: the rule, per processor
    assert resolve_dtype(env={}, flags=avx2).dtype == "float32"
    assert resolve_dtype(env={}, flags=amx).dtype == "bfloat16"
    assert resolve_dtype(env={DTYPE_ENV: ""}, flags=amx).dtype == "bfloat16"  # empty: unset
    # the variable forces either way, and "auto" there is the rule
    env = resolve_dtype(env={DTYPE_ENV: "bfloat16"}, flags=avx2)
    assert (env.dtype, env.reason) == ("bfloat16", f"bfloat16: forced by {DTYPE_ENV}")
    assert resolve_dtype(env={DTYPE_ENV: "float32"}, flags=amx).dtype == "float32"
    assert resolve_dtype(env={DTYPE_ENV: "auto"}, flags=avx2).dtype == "float32"
    # the option wins over the variable, "auto" included (an explicit auto is the rule)
    opt = resolve_dtype("float32", env={DTYPE_ENV: "bfloat16"}, flags=amx)
    assert (opt.dtype, opt.reason) == ("float32", "float32: forced by the dtype option")
    assert resolve_dtype("bfloat16", env={DTYPE_ENV: "float32"}, flags=avx2).dtype == "bfloat16"
    assert resolve_dtype("auto", env={DTYPE_ENV: "bfloat16"}, flags=avx2).dtype == "float32"
    # a bad variable names the variable and its value, unless the option overrides it
    with pytest.raises(InvalidArgumentError, match=f"{DTYPE_ENV} must be .* got 'fp16'") as err:
        resolve_dtype(env={DTYPE_ENV: "fp16"}, flags=avx2)
    assert err.value.arg == DTYPE_ENV
    assert resolve_dtype("float32", env={DTYPE_ENV: "fp16"}, flags=avx2).dtype == "float32"


def test_on_gpu_auto_is_the_models_own_dtype() -> None:
    gpu = resolve_dtype(env={}, flags=EPYC_AVX2, on_cpu=False)
    assert gpu.dtype == "auto" and "GPU" in gpu.reason
    assert resolve_dtype("float32", env={}, on_cpu=False).dtype == "float32"


def test_proc_cpuinfo_is_read_for_x86_and_arm(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
        f"flags\t\t: {' '.join(EPYC_AVX2)}\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
        f"flags\t\t: {' '.join(EPYC_AVX2)}\n"
    )
    info = cpu._read_proc_cpuinfo(str(x86))
    assert info is not None and info.model == "AMD EPYC 7B13" and info.source == "/proc/cpuinfo"
    assert info.reported() == {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False}
    assert choose_dtype(info.flags)[0] == "float32"
    arm = tmp_path / "arm"
    arm.write_text(f"processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: {' '.join(NEOVERSE_V1)}\n")
    info = cpu._read_proc_cpuinfo(str(arm))
    assert info is not None and "bf16" in info.flags and choose_dtype(info.flags)[0] == "bfloat16"
    assert cpu._read_proc_cpuinfo(str(tmp_path / "missing")) is None


def test_this_machines_choice_is_consistent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    info = cpu.cpu_info()
    choice = resolve_dtype()
    if info.source:
        assert choice == cpu.DtypeChoice(*choose_dtype(info.flags))
    else:
        assert choice.dtype == "float32"


def test_the_engine_rejects_a_bad_dtype_before_starting_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    from toporoute.llm.vllm_engine import VLLMEngine

    def no_model(*args, **kwargs):
        raise AssertionError("the dtype is checked first")

    monkeypatch.setattr("toporoute.llm.vllm_engine.resolve_model", no_model)
    with pytest.raises(InvalidArgumentError, match="dtype must be .* got 'half'"):
        VLLMEngine(dtype="half")
    monkeypatch.setenv(DTYPE_ENV, "bf16")
    with pytest.raises(InvalidArgumentError, match=f"{DTYPE_ENV} must be .* got 'bf16'"):
        VLLMEngine()


class _FakeVLLM:
    """Stands in for ``toporoute.llm.VLLMEngine``: records how the command opened it, answers like a team."""

    opened: ClassVar[list[tuple[object, dict]]] = []

    @classmethod
    async def open(cls, model=None, **kwargs):
        cls.opened.append((model, kwargs))
        engine = team_engine(done_at=2)
        engine.dtype = kwargs.get("dtype", "float32")
        engine.dtype_reason = f"{engine.dtype}: from the fake"
        return engine


def test_the_command_passes_dtype_and_records_the_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    write_tasks_jsonl([MATH], tasks)
    monkeypatch.setattr("toporoute.llm.VLLMEngine", _FakeVLLM)
    _FakeVLLM.opened.clear()
    base = ["run", "single", "--tasks", str(tasks), "--no-progress"]
    assert cli.main([*base, "--out", str(tmp_path / "a"), "--dtype", "bfloat16"]) == 0
    assert cli.main([*base, "--out", str(tmp_path / "b")]) == 0
    # without --dtype the engine gets no dtype (it reads $TOPOROUTE_DTYPE, then the rule)
    assert [kw for _, kw in _FakeVLLM.opened] == [
        {"max_model_len": 8192, "dtype": "bfloat16"},
        {"max_model_len": 8192},
    ]
    for out, dtype in (("a", "bfloat16"), ("b", "float32")):
        run = json.loads((tmp_path / out / "single" / "run.json").read_text())
        assert (run["dtype"], run["dtype_reason"]) == (dtype, f"{dtype}: from the fake")


def test_the_command_rejects_a_bad_dtype_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "single", "--out", "x", "--dtype", "fp16"])
    err = capsys.readouterr().err
    assert "--dtype" in err and "'fp16'" in err and "bfloat16" in err
