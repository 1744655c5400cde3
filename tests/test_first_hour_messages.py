"""Defaults and messages of the first-hour review (issue 24, items 6-11)."""
from __future__ import annotations

import pytest

from sim import simulate
from sim.cli import main

TINY = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "output": {"plots": False, "progress": False}}


def test_orca_reserves_the_workload_output_bound(capsys, tmp_path):
    """Orca reserves prompt + the workload's output bound (2,048 for the default conversation
    lognormal), not the whole 131,072-token context: at 8 req/s its p99 TTFT is milliseconds."""
    wl = {"rate": 8.0, "num_requests": 300}
    bound = simulate({**TINY, "scheduler": {"name": "orca"}, "workload": wl})
    context = simulate({**TINY, "scheduler": {"name": "orca", "reserve": "context"}, "workload": wl})
    assert bound.summary["ttft_s"]["p99"] < 1.0 < context.summary["ttft_s"]["p99"]
    assert main(["run", "--scheduler", "orca", "--num-requests", "20", "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "reservation (orca): each request reserves its prompt + its output limit: at most 2,048 (workload.output's bound)" in out


def test_orca_reservation_is_prompt_plus_bound():
    """Exact: with outputs uniform in [1, 9] every request's limit is min(9, context - prompt)."""
    from sim.workload import LengthDist, WorkloadConfig, build_workload
    import numpy as np

    wl = WorkloadConfig(rate=5.0, num_requests=50, prompt=LengthDist(kind="fixed", value=100),
                        output=LengthDist(kind="uniform", min=1, max=9))
    reqs = list(build_workload(wl, max_context=131072, rng=np.random.default_rng(0)))
    assert {r.max_output_tokens for r in reqs} == {9}
    assert {r.max_output_tokens for r in build_workload(wl, max_context=104, rng=np.random.default_rng(0))} == {4}
    from sim.workload.synthetic import output_bound

    assert output_bound(LengthDist(kind="fixed", value=9000, max=8192), {}) == 8192  # as the draws are clipped
    assert output_bound(LengthDist(kind="lognormal", median=100, sigma=1.0), {}) is None  # unbounded: the context


def test_rejections_name_the_knob_and_all_rejected_exits_3(tmp_path, capsys):
    argv = ["run", "--scheduler", "vllm", "--num-requests", "10", "--out", str(tmp_path / "o"), "--no-plots",
            "--set", "workload.prompt.kind=fixed", "--set", "workload.prompt.value=9000", "--set", "workload.prompt.max=9000"]
    assert main(argv) == 3
    cap = capsys.readouterr()
    assert "10 rejected (exceeds_token_budget 10)" in cap.out
    assert "longer than scheduler.max_num_batched_tokens (8,192)" in cap.out
    err = [ln for ln in cap.err.splitlines() if ln.startswith("servesim: error")]
    assert len(err) == 1 and "every request was rejected" in err[0] and "max_num_batched_tokens" in err[0]
    assert (tmp_path / "o" / "summary.json").exists()  # the results are still written
    assert main(argv + ["--quiet"]) == 3  # quiet too: the error line carries the knob


def test_version_from_package_metadata(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        from sim.cli import build_parser
        build_parser().parse_args(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"servesim {version('servesim')}"
    assert main(["--version"]) == 0


def test_help_lists_schedulers_and_routers(capsys):
    from sim.cluster import ROUTERS
    from sim.scheduler import REGISTRY

    assert main(["run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ", ".join(sorted(REGISTRY)) in text and ", ".join(sorted(ROUTERS)) in text


def test_misspelt_flag_gets_a_suggestion(capsys):
    assert main(["run", "--schedular", "orca"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("unrecognized arguments: --schedular; did you mean --scheduler? (see servesim --help)")


def test_catalog_json(capsys):
    import json

    from sim.catalog import get_model, list_hardware, list_models

    assert main(["catalog", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [m["id"] for m in d["models"]] == [m.id for m in list_models()]
    assert [h["id"] for h in d["hardware"]] == [h.id for h in list_hardware()]
    m8 = next(m for m in d["models"] if m["id"] == "llama-3.1-8b")
    assert m8["total_params"] == get_model("llama-3.1-8b").total_params and m8["kv_bytes_per_token_bf16"] == 131072


def test_run_header_names_the_model_and_the_split(tmp_path, capsys):
    import json

    d = tmp_path / "Tiny-2L"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 4096,
        "_name_or_path": "acme/Tiny-2L"}))
    base = ["--num-requests", "5", "--no-plots", "--set", "workload.prompt.max=512"]
    assert main(["run", "--model", str(d), "--out", str(tmp_path / "a"), *base]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(f"acme/Tiny-2L (from {d}) | 1 x 1 h100-sxm")
    assert main(["run", "--replicas", "3", "--set", "cluster.prefill_replicas=1", "--out", str(tmp_path / "b"), *base]) == 0
    assert "| 3 x 1 h100-sxm (1 prefill + 2 decode) (tp=1, pp=1)" in capsys.readouterr().out


@pytest.mark.parametrize("alias,card", [("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
                                        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
                                        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3")])
def test_model_aliases(alias, card):
    from sim.catalog import get_model

    assert get_model(alias).id == card


def test_mistral_v03_card_differs_from_v01_where_the_configs_do():
    from sim.catalog import get_model

    v1, v3 = get_model("mistral-7b"), get_model("mistral-7b-v0.3")
    assert (v1.vocab_size, v1.sliding_window) == (32000, 4096)
    assert (v3.vocab_size, v3.sliding_window, v3.max_context) == (32768, None, 32768)
    assert round(v3.total_params / 1e9, 2) == v3.params_b == 7.25


def test_validate_warns_on_a_busy_host():
    from calibration.validate import busy_note

    note = busy_note([22.0, 21.5], 2)
    assert note.startswith("the host was busy during the replay (load average up to 22.0 on 2 cores)")
    assert busy_note([1.9, 2.0], 2) is None and busy_note([None, None], 2) is None
