"""The last bad inputs of the first-hour review (issue 24, items 15-18): each is one line on
stderr and exit 2, raised before any simulation (the simulator is a tripwire here)."""
from __future__ import annotations

import json
import time

import pytest

from sim.catalog import CatalogError, get_model
from conftest import one_error
from sim.cli import main


def bomb(levels: int = 9, leaf: str = "workload") -> str:
    """A "billion laughs" YAML: 9 ** levels leaves once the aliases are expanded."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines + [f"{leaf}: {{x: *a{levels}}}"]) + "\n"


def test_alias_bomb_fails_fast(tmp_path, capsys, tripwire):
    p = tmp_path / "bomb.yaml"
    p.write_text(bomb())
    t0 = time.process_time()
    line = one_error(capsys, ["run", str(p), "--out", str(tmp_path / "o")])
    assert "unknown config key workload.x" in line
    assert time.process_time() - t0 < 30  # the expanded tree (387 M leaves) would take hours


def test_check_keys_walks_each_alias_once():
    from sim.config import check_keys, parse_yaml

    data = parse_yaml(bomb(30), "bomb")  # 9**30 leaves expanded: finishes only if shared nodes are walked once
    check_keys(data)
    with pytest.raises(Exception, match="key 1 under"):
        check_keys({"a": [data["a1"], {1: "x"}]})


LLAMA = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768}
MIXTRAL = {**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}

CONFIG_JSON = [
    ({"num_hidden_layers": 0}, "num_hidden_layers must be at least 1, got 0"),
    ({"num_attention_heads": 0}, "num_attention_heads must be at least 1, got 0"),
    ({"num_hidden_layers": True}, "num_hidden_layers must be a whole number, got true"),
    ({"hidden_size": 4096.7}, "hidden_size must be a whole number, got 4096.7"),
    ({"hidden_size": "4096"}, "hidden_size must be a whole number"),
    ({"num_key_value_heads": 3}, "32 attention heads do not split into groups over 3 KV heads"),
    ({"max_position_embeddings": 0}, "max_position_embeddings must be at least 1, got 0"),
    ({"sliding_window": -1}, "sliding_window must be at least 1, got -1"),
    ({**MIXTRAL, "num_local_experts": 0}, "num_local_experts must be at least 1, got 0"),
    ({**MIXTRAL, "num_experts_per_tok": 9}, "experts_top_k (9) must lie in 1..num_experts (8)"),
]


@pytest.mark.parametrize("change,phrase", CONFIG_JSON, ids=[p for _, p in CONFIG_JSON])
def test_bad_config_json(tmp_path, capsys, tripwire, change, phrase):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({**LLAMA, **change}))
    line = one_error(capsys, ["run", "--model", str(p), "--out", str(tmp_path / "o")])
    assert phrase in line and str(p) in line, line


def test_card_shape_checks():
    base = get_model("llama-3.1-8b")
    from dataclasses import asdict

    from sim.catalog import ModelCard

    with pytest.raises(CatalogError, match="num_kv_heads must be at least 1"):
        ModelCard(**{**asdict(base), "num_kv_heads": 0})
    assert ModelCard(**asdict(base)) == base


def test_good_config_json_still_loads(tmp_path):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({**MIXTRAL, "hidden_size": 4096.0, "sliding_window": None}))
    m = get_model(str(p))
    assert (m.hidden_size, m.num_experts, m.sliding_window) == (4096, 8, None)


def _trace(tmp_path, prompt) -> str:
    p = tmp_path / "t.csv"
    p.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,10,10\n1,{prompt},10\n")
    return str(p)


def test_huge_trace_lengths(tmp_path, capsys):
    """(A trace is read as the run goes: its rows are checked as they are read.)"""
    for prompt in ("3000000000", "1e30"):
        t = _trace(tmp_path, prompt)
        line = one_error(capsys, ["trace", "stats", t])
        assert f"{t}, line 3: prompt_tokens '{prompt}' is more than 10,000,000 tokens" in line, line
        line = one_error(capsys, ["run", "--trace", t, "--out", str(tmp_path / "o")])
        assert "is more than 10,000,000 tokens" in line


REPROS = [
    (["validate-silicon", "--models", "", "--out", "{tmp}/vs"], "--models: expected a comma-separated list"),
    (["run", "--out", "/proc/nope"], "--out /proc/nope: cannot create a folder in /proc"),
    (["run", "--set", "cluster.autoscale.enabled=true", "--set", "cluster.autoscale.interval_s=1e-9"],
     "cluster.autoscale.interval_s: Input should be greater than or equal to 0.01"),
    (["run", "--set", "cluster.autoscale.enabled=true", "--set", "cluster.autoscale.max_replicas=1000000000"],
     "cluster.autoscale.max_replicas: Input should be less than or equal to 10000"),
    (["run", "--set", "cluster.autoscale.enabled=true", "--set", "cluster.autoscale.target_outstanding=0.001"],
     "cluster.autoscale.target_outstanding: Input should be greater than or equal to 1"),
    (["run", "{tmp}/straggler.yaml"], "faults.events.0.factor: Input should be less than or equal to 1000"),
    (["run", "{tmp}/down.yaml"], "faults.events.0.duration_s: Input should be less than or equal to 31536000"),
    (["run", "--trace", "{tmp}"], "is a folder; give a trace file in it"),
    (["run", "--trace", "/dev/zero"], "/dev/zero: is not a regular file"),
    (["run", "--model", "nomodel"], "or give a Hugging Face config.json (or the folder holding it)"),
    (["run", "--out", "{tmp}/mine"], "holds other files (thesis.tex) and no servesim results"),
]


@pytest.mark.parametrize("argv,phrase", REPROS, ids=[" ".join(a) for a, _ in REPROS])
def test_repro_is_one_line_before_simulating(tmp_path, capsys, tripwire, argv, phrase):
    (tmp_path / "straggler.yaml").write_text(
        "cluster: {replicas: 2}\nfaults:\n  events:\n"
        "    - {kind: straggler, at_s: 0, replica: 0, duration_s: 10, factor: 1.0e+300}\n")
    (tmp_path / "down.yaml").write_text(
        "faults:\n  events:\n    - {kind: crash, at_s: 0, replica: 0, duration_s: 1.0e+12}\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("x")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if argv[0] == "run" and "--out" not in argv:
        argv += ["--out", str(tmp_path / "o")]
    line = one_error(capsys, argv)
    assert phrase in line, line
    assert not (tmp_path / "o").exists()  # nothing created before the error


def test_profile_cuda_without_gpu(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: the refusal cannot be seen")
    line = one_error(capsys, ["profile", "--device", "cuda", "--model", "llama-3.1-8b", "--out", str(tmp_path / "p")])
    assert "--device cuda but torch sees no CUDA GPU" in line


def test_model_folder_with_config_json(tmp_path):
    d = tmp_path / "Tiny-2L"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 2, "_name_or_path": "acme/Tiny-2L"}))
    m = get_model(str(d))
    assert (m.num_layers, m.name) == (2, "acme/Tiny-2L")


def test_results_folder_is_reused_without_stale_files(tmp_path, capsys):
    out = tmp_path / "o"
    base = ["run", "--num-requests", "20", "--out", str(out), "--set", "workload.rate=20"]
    assert main(base) == 0
    assert (out / "steps.parquet").exists() and (out / "plots").is_dir()
    assert main(base + ["--no-plots", "--set", "output.step_records=false"]) == 0
    printed = capsys.readouterr().out
    assert "replacing the previous run there" in printed
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "requests.parquet", "summary.json"]


def test_calibration_roots_may_hold_other_folders(tmp_path):
    """``fit``/``profile``/``validate`` write ``OUT/<hardware>/<model>/`` under a shared root: a
    root that holds other hardware is theirs to write into; a results command refuses it."""
    from argparse import Namespace

    from sim.cli import build_parser, check_out
    from sim.errors import ServesimError

    (tmp_path / "cpu").mkdir()
    for argv in (["fit", "P", "--out", str(tmp_path)], ["profile", "--model", "m", "--out", str(tmp_path)]):
        check_out(build_parser().parse_args(argv))
    with pytest.raises(ServesimError, match="holds other files"):
        check_out(Namespace(out=str(tmp_path)))
