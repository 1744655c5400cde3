"""Every bad input ends as one line on stderr and a non-zero exit, checked before any simulation
runs, never a traceback (issue 10, item 4). The simulator is replaced by a tripwire, so an input
that slips past validation into a simulation fails the test."""
from __future__ import annotations

import gzip
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from sim import simulate
from conftest import one_error
from sim.cli import main
from sim.config import Config
from sim.errors import ConfigError


def _files(tmp_path):
    (tmp_path / "numkey.yaml").write_text("model: llama-3.1-8b\n1: x\n")
    (tmp_path / "dup.yaml").write_text("seed: 1\nworkload:\n  rate: 2\nseed: 2\n")
    (tmp_path / "nan.yaml").write_text("workload:\n  arrival: diurnal\n  diurnal: {phase_s: .nan}\n")
    (tmp_path / "bin.csv").write_bytes(bytes(range(256)) * 20)
    rows = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i},10,10\n" for i in range(3000))
    (tmp_path / "full.csv.gz").write_bytes(gzip.compress(rows.encode()))
    (tmp_path / "trunc.csv.gz").write_bytes((tmp_path / "full.csv.gz").read_bytes()[:1500])
    (tmp_path / "afile").write_text("x")
    (tmp_path / "badspec.yaml").write_text("grid:\n  workload.rate: [1, .nan]\n")
    (tmp_path / "badlist.json").write_text("[^")
    (tmp_path / "emptylist.json").write_text(" [ ]\n")
    (tmp_path / "numlist.json").write_text("[1, 2]")


# Each repro of the issue: (argv, a phrase the one line must contain).
REPROS = [
    (["run", "--tp", "3"], "tp=3 does not divide llama-3.1-8b's 32 attention heads"),
    (["run", "--pp", "7"], "pp=7 does not divide llama-3.1-8b's 32 layers"),
    (["run", "--hardware", "a100-80gb", "--set", "dtype=fp8"], "has no fp8 tensor cores"),
    (["run", "--out", "{tmp}/afile"], "is a file"),
    (["run", "--out", "{tmp}/afile/sub"], "which is a file"),
    (["run", "{tmp}/numkey.yaml"], "key 1 is a int"),
    (["run", "{tmp}/dup.yaml"], "duplicated key 'seed' at line 4 (first at line 1)"),
    (["run", "{tmp}/nan.yaml"], "workload.diurnal.phase_s: Input should be a finite number"),
    (["run", "--trace", "{tmp}/bin.csv"], "not a text trace"),
    (["run", "--trace", "{tmp}/badlist.json"], "line 1: not valid JSON"),
    (["run", "--trace", "{tmp}/emptylist.json"], "the JSON list is empty"),
    (["run", "--trace", "{tmp}/numlist.json"], "expected a JSON object in the list, found int"),
    (["run", "--set", "workload.prompt.kind=fixed", "--set", "workload.prompt.value=1.0e+30"], "workload.prompt.value"),
    (["run", "--set", "workload.prompt.kind=fixed", "--set", "workload.prompt.value=1000000000000"], "less than or equal to 10000000"),
    (["run", "--set", "workload.rate=.nan"], "workload.rate: Input should be a finite number"),
    (["run", "--rate", "nan"], "not a finite number"),
    (["run", "--rate", "inf"], "not a finite number"),
    (["run", "--set", "workload.arrival=diurnal", "--set", "workload.diurnal.phase_s=.nan"], "finite"),
    (["run", "--set", "workload.prompt.sigma=80"], "workload.prompt.sigma"),
    (["run", "--replicas", "100000000"], "cluster.replicas"),
    (["run", "--set", "kv.num_gpu_blocks=100000000000"], "kv.num_gpu_blocks"),
    (["run", "--set", "workload.sessions.turns.max=1000000"], "workload.sessions"),
    (["run", "--set", "workload.num_requests=null", "--set", "workload.duration_s=1.0e+12"], "expected requests"),
    (["run", "--set", "scheduler.max_num_seqs=.inf"], "scheduler.max_num_seqs"),
    (["plan", "--model", "llama-3.1-8b", "--rate", "-1", "--out", "{tmp}/p"], "--rate"),
    (["ab", "--a", "scheduler.nme=x", "--seeds", "1", "--out", "{tmp}/ab"], "unknown config key scheduler.nme"),
    (["ab", "--seeds", "0", "--a", "seed=1", "--out", "{tmp}/ab"], "--seeds"),
    (["capacity", "--slo-ttft-p99", "-1", "--out", "{tmp}/c"], "--slo-ttft-p99"),
    (["capacity", "--slo-tpot-p99", "nan", "--out", "{tmp}/c"], "--slo-tpot-p99"),
    (["run", "--set", "novalue"], "--set expects key=value"),
    (["run", "--set", "seed.x=1"], "seed: Input should be a valid integer"),
    (["run", "{tmp}/missing.yaml"], "does not exist"),
    (["plan", "--model", "llama-3.1-8b", "--rate", "1", "--tp", "x", "--out", "{tmp}/p"], "--tp"),
    (["plan", "--model", "llama-3.1-8b", "--rate", "1", "--schedulers", "nope", "--out", "{tmp}/p"], "unknown scheduler"),
    (["plan", "--model", "llama-3.1-8b", "--rate", "1", "--gpus", ",", "--out", "{tmp}/p"], "at least one GPU"),
    (["plan", "--model", "llama-3.1-8b", "--rate", "1", "--gpus", "tpu", "--out", "{tmp}/p"], "unknown hardware"),
    (["sweep", "{tmp}/badspec.yaml", "--out", "{tmp}/s"], "sweep point 1 (workload.rate=nan, seed 0)"),
    (["trace", "stats", "{tmp}/bin.csv"], "not a text trace"),
    (["report", "{tmp}/nowhere"], "is not a results folder"),
]


@pytest.mark.parametrize("argv,phrase", REPROS, ids=[" ".join(a) for a, _ in REPROS])
def test_repro_is_one_line_before_simulating(tmp_path, capsys, tripwire, argv, phrase):
    _files(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if argv[0] == "run" and "--out" not in argv:
        argv += ["--out", str(tmp_path / "o")]
    line = one_error(capsys, argv)
    assert phrase in line, line


def test_truncated_gz_trace_is_one_line(tmp_path, capsys):
    """Truncation shows only once the stream reaches the end: one line, exit 2, no results."""
    _files(tmp_path)
    line = one_error(capsys, ["run", "--trace", str(tmp_path / "trunc.csv.gz"), "--quiet", "--no-plots",
                              "--out", str(tmp_path / "o")])
    assert "not a readable .gz file" in line
    assert not (tmp_path / "o" / "summary.json").exists()


def test_one_line_file_reads_bounded(tmp_path, capsys, monkeypatch):
    """A file without line breaks (a 2 GB one in the issue; here a few MB with the limit lowered)
    is refused at the limit instead of being read whole."""
    import sim.workload.traces as traces

    monkeypatch.setattr(traces, "MAX_LINE_CHARS", 64 * 1024)
    p = tmp_path / "oneline.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens," + "x" * 4_000_000)
    reads = []
    real = traces._TraceText.readline

    def counting(self):
        s = real(self)
        reads.append(len(s))
        return s

    monkeypatch.setattr(traces._TraceText, "readline", counting)
    line = one_error(capsys, ["run", "--trace", str(p), "--quiet", "--out", str(tmp_path / "o")])
    assert "longer than 65,536 characters" in line
    assert max(reads, default=0) <= 64 * 1024 + 1


def test_broken_pipe_is_quiet(tmp_path):
    """``servesim run | head -1``: no traceback, no 'Exception ignored' noise."""
    import subprocess
    import sys

    cmd = (f"{sys.executable} -m sim.cli run --num-requests 20 --no-plots --out {tmp_path / 'o'} | head -1")
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert r.stderr.strip() == "", r.stderr
    assert (tmp_path / "o" / "summary.json").is_file()


def test_python_api_types(tripwire):
    with pytest.raises(TypeError, match="a config is a YAML path, a dict of sections"):
        simulate(5)
    with pytest.raises(ConfigError, match="overrides must be a list of 'key=value' strings"):
        simulate(None, overrides="workload.rate=3")
    with pytest.raises(ConfigError, match="key 3 is a int"):
        simulate({3: "x"})


def test_bug_is_one_line_unless_debug(capsys, monkeypatch):
    """A genuine bug is one 'internal error' line (exit 1); SERVESIM_DEBUG=1 raises it."""
    import sim.shards

    def bug(*a, **k):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(sim.shards, "run_engine", bug)
    line = one_error(capsys, ["run", "--quiet", "--out", "/nonexistent-dir-for-test/o"], code=1)
    assert line.startswith("servesim: internal error: ZeroDivisionError: boom")
    monkeypatch.setenv("SERVESIM_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["run", "--quiet", "--out", "/nonexistent-dir-for-test/o"])


# ---------------------------------------------------------------------------- fuzzing


def _leaf_keys(cls=Config, prefix="") -> list[str]:
    keys = []
    for name, f in cls.model_fields.items():
        ann = f.annotation
        sub = next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if sub is not None and name not in ("classes",):
            keys += _leaf_keys(sub, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


LEAVES = _leaf_keys() + ["scheduler.max_num_seqs", "scheduler.max_num_batched_tokens"]
NON_FINITE = [".nan", ".inf", "-.inf", "1.0e+999", "-1.0e+999"]
ident = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8)

bad_set = st.one_of(
    st.tuples(st.sampled_from(LEAVES), st.sampled_from(NON_FINITE)).map(lambda kv: f"{kv[0]}={kv[1]}"),
    st.tuples(st.sampled_from(sorted({k.rsplit('.', 1)[0] for k in LEAVES if '.' in k})), ident)
      .filter(lambda kv: f"{kv[0]}.{kv[1]}" not in LEAVES and not kv[0].startswith("scheduler"))
      .map(lambda kv: f"{kv[0]}.{kv[1]}=1"),
    st.sampled_from(["workload.rate=-3", "workload.num_requests=0", "parallelism.tp=0", "parallelism.tp=5",
                     "parallelism.pp=3", "cluster.replicas=0", "kv.block_size=0", "kv.gpu_memory_utilization=1.5",
                     "model=gpt-9", "hardware=tpu", "scheduler.name=nope", "dtype=int4", "seed=-1",
                     "workload.prompt.kind=fixed", "workload.arrival=burst", "workload.tenants=[]",
                     "workload.prompt.max=0", "kv.watermark=1", "slo.ttft_s=0", "workload={a: 1}"]),
)
bad_flag = st.one_of(
    st.tuples(st.sampled_from(["--rate"]), st.sampled_from(["nan", "inf", "-inf", "-2", "0", "x", "1e999"])),
    st.tuples(st.sampled_from(["--tp", "--pp", "--replicas", "--num-requests"]),
              st.sampled_from(["0", "-1", "x", "2.5", "nan"])),
    st.tuples(st.just("--tp"), st.sampled_from(["3", "5", "6", "7", "65"])),
    st.tuples(st.just("--seed"), st.sampled_from(["-1", "x", "nan"])),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sets=st.lists(bad_set, min_size=0, max_size=3), flags=st.lists(bad_flag, min_size=0, max_size=2),
       good=st.lists(st.sampled_from(["workload.rate=3", "kv.prefix_caching=true", "scheduler.name=sarathi"]),
                     max_size=2))
def test_fuzz_bad_inputs_one_line(tmp_path, capsys, tripwire, sets, flags, good):
    if not sets and not flags:
        sets = ["workload.rate=.nan"]
    argv = ["run", "--out", str(tmp_path / "o")]
    for s in good + sets:
        argv += ["--set", s]
    for f, v in flags:
        argv += [f, v]
    one_error(capsys, argv)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=0, max_size=3000), gz=st.booleans())
def test_fuzz_garbage_traces(tmp_path, capsys, tripwire, data, gz):
    p = tmp_path / ("t.csv.gz" if gz else "t.csv")
    p.write_bytes(data[: len(data) // 2] if gz else data)
    one_error(capsys, ["run", "--trace", str(p), "--out", str(tmp_path / "o")])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_fuzz_garbage_yaml(tmp_path, capsys, tripwire, text):
    """Any text after a bad key: one line, never a traceback."""
    p = tmp_path / "c.yaml"
    p.write_bytes(("seed: .nan\n" + text).encode("utf-8", "replace"))
    one_error(capsys, ["run", str(p), "--out", str(tmp_path / "o")])
