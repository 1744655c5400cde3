"""kernels/: CPU profiling of the llama-tiny card, the profile contract, resume, collectives,
the Vidur converter, `servesim profile` and the campaign script's CPU mode."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernels import convert, grid  # noqa: E402
from kernels.profile import run  # noqa: E402
from kernels.schema import FAMILIES, columns, read_rows  # noqa: E402
from sim.catalog import get_model, load_model_card  # noqa: E402
from sim.cost.ops import shard_shapes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "calibration" / "cards" / "llama-tiny.yaml"
COMPUTE = ("gemm", "attn_prefill", "attn_decode", "elementwise", "sampling")


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("profiles")
    t0 = time.perf_counter()
    folder = run("cpu", str(TINY), [1], ["bf16"], "small", out, families=COMPUTE, progress=False)
    return folder, time.perf_counter() - t0


def test_tiny_card_loads_from_path():
    card = load_model_card(TINY)
    assert (card.id, card.num_layers, card.hidden_size, card.num_kv_heads, card.head_dim) == ("llama-tiny", 4, 256, 4, 32)
    assert "synthetic" in card.source


def test_profile_files_match_the_contract(tiny_profile):
    folder, elapsed = tiny_profile
    assert folder.parts[-2:] == ("cpu", "llama-tiny")
    assert elapsed < 60, f"small CPU profile of llama-tiny took {elapsed:.1f} s"
    card = load_model_card(TINY)
    sh = shard_shapes(card, 1)
    for fam in COMPUTE:
        with (folder / f"{fam}.csv").open() as f:
            assert tuple(next(csv.reader(f))) == columns(fam)
        rows = read_rows(folder / f"{fam}.csv")
        assert len(rows) == sum(1 for f, _ in grid.points(card, 1, "bf16", "small") if f == fam)
        for r in rows:
            assert r["dtype"] == "bf16" and r["tp"] == 1
            assert 0 < r["time_us_p10"] <= r["time_us"] <= r["time_us_p90"]
            assert r["repeats"] >= 3
    gemm = read_rows(folder / "gemm.csv")
    assert {r["op"] for r in gemm} == set(sh.gemms)
    assert all((r["n"], r["k"]) == sh.gemms[r["op"]] and r["m"] == r["tokens"] for r in gemm)
    dec = read_rows(folder / "attn_decode.csv")
    assert any(r["context_min"] < r["context_max"] for r in dec), "a mixed-context decode batch"
    assert all(r["block_size"] == 16 and r["kv_heads"] == sh.kv_heads for r in dec)
    meta = json.loads((folder / "meta.json").read_text())
    for k in ("device_name", "torch_version", "date", "host", "grid_spec", "threads", "skipped", "dtypes"):
        assert k in meta
    assert meta["complete"] and meta["threads"] == 1 and meta["model"] == "llama-tiny"


def test_resume_adds_no_rows(tiny_profile, tmp_path):
    folder, _ = tiny_profile
    copy = tmp_path / "cpu" / "llama-tiny"
    shutil.copytree(folder, copy)
    before = {f: (copy / f"{f}.csv").read_text() for f in COMPUTE}
    # an interrupted run: drop the last rows of one file, they must be redone and only they
    lines = before["gemm"].splitlines(keepends=True)
    (copy / "gemm.csv").write_text("".join(lines[:-3]))
    run("cpu", str(TINY), [1], ["bf16"], "small", tmp_path, families=COMPUTE, progress=False)
    assert len(read_rows(copy / "gemm.csv")) == len(lines) - 1
    t0 = time.perf_counter()
    run("cpu", str(TINY), [1], ["bf16"], "small", tmp_path, families=COMPUTE, progress=False)
    assert time.perf_counter() - t0 < 5
    for f in COMPUTE[1:]:
        assert (copy / f"{f}.csv").read_text() == before[f]
    assert len(read_rows(copy / "gemm.csv")) == len(lines) - 1
    runs = json.loads((copy / "meta.json").read_text())["runs"]
    assert [r["rows_added"] for r in runs][-2:] == [3, 0]


def test_moe_expert_gemms_are_grouped(tmp_path):
    card = tmp_path / "moe-tiny.yaml"
    text = TINY.read_text().replace("id: llama-tiny", "id: moe-tiny").replace("name: llama-tiny", "name: moe-tiny")
    card.write_text(text + "num_experts: 8\nexperts_top_k: 2\n")
    folder = run("cpu", str(card), [2], ["fp32"], "small", tmp_path, families=("gemm",), progress=False)
    rows = read_rows(folder / "gemm.csv")
    experts = [r for r in rows if r["op"].startswith("expert_")]
    assert {r["op"] for r in experts} == {"expert_gate_up", "expert_down"}
    big = [r for r in experts if r["tokens"] == 512]
    assert all(r["groups"] == 8 and r["m"] == 128 for r in big)  # 512 tokens x top-2 over 8 experts
    assert all(r["tp"] == 2 and r["dtype"] == "fp32" for r in rows)


def test_full_grid_shape():
    toks = grid.GRIDS["full"]["gemm_tokens"]
    assert toks[:64] == list(range(1, 65)) and toks[-1] == 16384 and 96 in toks and 12288 in toks
    pts = grid.points(get_model("llama-3.1-70b"), 8, "bf16", "full")
    assert len(pts) == len({(f, tuple(sorted(k.items()))) for f, k in pts}), "grid points are unique"


@pytest.mark.slow
def test_gloo_collectives_world_size_2(tmp_path):
    folder = run("cpu", str(TINY), [1, 2], ["bf16"], "small", tmp_path, families=("collective",), progress=False)
    rows = read_rows(folder / "collective.csv")
    assert {(r["op"], r["world_size"]) for r in rows} == {("all_reduce", 2), ("all_gather", 2)}
    assert all(r["time_us"] > 0 for r in rows)
    assert {r["bytes"] for r in rows} == {t * 256 * 2 for t in grid.GRIDS["small"]["collective_tokens"]}


def _write_vidur(folder: Path) -> None:
    """A small file in Vidur's published compute-profile schema (times in ms)."""
    folder.mkdir(parents=True)
    stats = ("min", "max", "mean", "median", "std")
    mops = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
            "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]
    head = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
            "num_tensor_parallel_workers"] + [f"time_stats.{o}.{s}" for o in mops for s in stats]
    with (folder / "mlp.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        for tp in (1, 2):
            for t in (1, 8, 8, 64):  # a duplicate point, as Vidur's files have
                times = [0.01 * t / tp if o != "attn_post_proj" or t != 64 else 0.0 for o in mops for _ in stats]
                w.writerow([32, 8, 4096, 14336, 128256, "True", t, tp] + times)
    ahead = [f"time_stats.{o}.{s}" for o in ("attn_prefill", "attn_decode") for s in stats] + [
        "n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers", "max_model_len",
        "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill", "attention_backend"]
    with (folder / "attention.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(ahead)
        w.writerow([0.5] * 5 + [""] * 5 + [4096, 32, 8, 16, 2, 4096, 1, 512, 1024, "True", "FLASH"])
        w.writerow([""] * 5 + [0.02] * 5 + [4096, 32, 8, 16, 2, 4096, 8, 0, 2048, "False", "FLASH"])


def test_vidur_converter(tmp_path):
    src = tmp_path / "vidur" / "h100" / "meta-llama" / "Meta-Llama-3-8B"
    _write_vidur(src)
    rc = convert.main(["--from", "vidur", "--in", str(src), "--model", "llama-3.1-8b", "--hardware-id", "h100-sxm",
                       "--dtype", "bf16", "--out", str(tmp_path / "p")])
    assert rc == 0
    folder = tmp_path / "p" / "h100-sxm" / "llama-3.1-8b"
    gemm = read_rows(folder / "gemm.csv")
    sh2 = shard_shapes(get_model("llama-3.1-8b"), 2)
    qkv2 = [r for r in gemm if r["op"] == "qkv" and r["tp"] == 2]
    assert [(r["tokens"], r["n"], r["k"]) for r in qkv2] == [(t, *sh2.gemms["qkv"]) for t in (1, 8, 64)]
    assert all((r["n"], r["k"]) == sh2.gemms[r["op"]] for r in gemm if r["tp"] == 2)
    assert qkv2[-1]["time_us"] == pytest.approx(320.0) and qkv2[-1]["time_us_p10"] is None
    assert not any(r["op"] == "o" and r["tokens"] == 64 for r in gemm), "zero times are dropped"
    elem = read_rows(folder / "elementwise.csv")
    assert {r["op"] for r in elem} == {"rmsnorm", "silu_mul", "rotary", "embedding"}
    (pre,) = read_rows(folder / "attn_prefill.csv")
    assert (pre["q_heads"], pre["kv_heads"], pre["chunk_tokens"], pre["context_tokens"], pre["time_us"]) == (16, 4, 512, 1024, 500.0)
    (dec,) = read_rows(folder / "attn_decode.csv")
    assert (dec["batch"], dec["context_max"], dec["kv_tokens_total"], dec["time_us"]) == (8, 2048, 16384, 20.0)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["source"] == "vidur" and meta["dtypes"] == ["bf16"]
    # converting again adds nothing
    folder2, added = convert.convert_vidur(src, "llama-3.1-8b", "h100-sxm", "bf16", tmp_path / "p")
    assert folder2 == folder and added == {}


def test_vidur_converter_rejects_other_model(tmp_path):
    src = tmp_path / "v"
    _write_vidur(src)
    rc = convert.main(["--from", "vidur", "--in", str(src), "--model", "llama-2-7b", "--hardware-id", "h100-sxm",
                       "--dtype", "fp16", "--out", str(tmp_path / "p")])
    assert rc == 2


def test_servesim_profile_command(tmp_path, capsys):
    from sim.cli import main

    rc = main(["profile", "--device", "cpu", "--model", str(TINY), "--ops", "sampling,elementwise",
               "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    folder = tmp_path / "cpu" / "llama-tiny"
    assert read_rows(folder / "sampling.csv") and read_rows(folder / "elementwise.csv")
    assert not (folder / "gemm.csv").exists()
    assert main(["profile", "--device", "cpu", "--model", "llama-9000", "--out", str(tmp_path)]) == 2
    assert main(["profile", "--device", "cpu", "--model", str(TINY), "--tp", "3", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown model" in err and "tp=3" in err


def test_servesim_profile_without_torch_hints_install(monkeypatch, capsys):
    from sim.cli import main

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    assert main(["profile", "--model", "llama-3.1-8b"]) == 2
    assert "pip install -e '.[torch]' in the servesim checkout" in capsys.readouterr().err


def test_campaign_script_cpu_mode(tmp_path):
    env = {**os.environ, "DEVICE": "cpu", "PROFILE_ROOT": str(tmp_path / "profiles"), "OUT": str(tmp_path / "out"),
           "PYTHON": sys.executable}
    res = subprocess.run(["bash", str(ROOT / "experiments" / "gpu_campaign.sh")], env=env, capture_output=True,
                         text=True, timeout=600)  # generous: a loaded 2-core CI machine
    assert res.returncode == 0, res.stdout + res.stderr
    assert "took" in res.stdout and "campaign: done" in res.stdout
    for root in (tmp_path / "profiles", tmp_path / "out" / "calibration" / "profiles"):
        folder = root / "cpu" / "llama-tiny"
        assert all((folder / f"{f}.csv").exists() for f in FAMILIES) and (folder / "meta.json").exists()
    if "engine check skipped" not in res.stdout:  # transformers installed: checked on a contiguous-attention profile
        eng = json.loads((tmp_path / "out" / "calibration" / "engine" / "fitted" / "engine_overhead.json").read_text())
        assert eng["provenance"]["cost_model"]["decode_attention"] == "contiguous"
        cmeta = json.loads((tmp_path / "out" / "calibration" / "profiles_contiguous" / "cpu" / "llama-tiny"
                            / "meta.json").read_text())
        assert cmeta["attention"] == "contiguous"


def test_kernels_import_without_simulator_dependencies():
    """The GPU image has torch, numpy, pyyaml only: kernels/ (and the sim modules it reads:
    sim.catalog, sim.cost.ops) must import without simpy, pydantic, pandas, scipy, tqdm."""
    code = ("import sys\n"
            "for m in ('simpy', 'pydantic', 'pandas', 'scipy', 'tqdm', 'matplotlib', 'pyarrow'): sys.modules[m] = None\n"
            "import kernels.profile, kernels.convert, kernels.collectives\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def _attention_reference(q, k, v):
    """softmax(q k^T / sqrt(d)) v of one sequence: q [heads, d], k / v [kv_heads, s, d] (GQA)."""
    g = q.shape[0] // k.shape[0]
    kk, vv = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
    w = torch.softmax((q.unsqueeze(1) @ kk.transpose(1, 2)).squeeze(1) / q.shape[-1] ** 0.5, -1)
    return (w.unsqueeze(1) @ vv).squeeze(1)


@pytest.mark.parametrize("ctx_min", [7, 40])
def test_contiguous_decode_attention_attends_each_sequence_over_its_own_context(ctx_min, monkeypatch):
    """``attn_decode_contiguous``: with equal contexts plain GQA attention over the whole cache;
    with mixed ones each sequence attends only to its last ``context`` positions (left padding)."""
    from kernels import ops

    made = []
    real = ops._randn
    monkeypatch.setattr(ops, "_randn", lambda *s, **kw: made.append(real(*s, **kw)) or made[-1])
    key = {"dtype": "fp32", "batch": 3, "q_heads": 8, "kv_heads": 4, "head_dim": 16, "block_size": 0,
           "context_min": ctx_min, "context_max": 40}
    out = ops.attn_decode_contiguous(key, torch.device("cpu"))()
    k, v, q = made
    ctx = ops.decode_contexts(3, ctx_min, 40)
    assert (ctx[0] < 40) == (ctx_min < 40)
    for i, c in enumerate(ctx):
        qi = q[i].reshape(8, 16)  # [b, q_heads, 1, d] or packed [b, kv_heads, group, d]: head order kept
        want = _attention_reference(qi, k[i, :, 40 - c:], v[i, :, 40 - c:])
        assert torch.allclose(out[i].reshape(8, 16), want, atol=1e-5)


def test_attention_variant_in_grid_meta_and_resume(tmp_path):
    """``--attention contiguous``: decode keys carry block_size 0, meta.json records the variant,
    the fit carries it to the cost model, and a folder holding the other variant is refused."""
    card = load_model_card(TINY)
    pts = [k for f, k in grid.points(card, 1, "fp32", "small", "contiguous") if f == "attn_decode"]
    paged = [k for f, k in grid.points(card, 1, "fp32", "small") if f == "attn_decode"]
    assert [k["block_size"] for k in pts] == [0] * len(paged) and {k["block_size"] for k in paged} == {16}
    assert [{**k, "block_size": 16} for k in pts] == paged
    from kernels.args import ProfileError
    from kernels.profile import plan

    with pytest.raises(ProfileError, match="--attention must be one of paged, contiguous"):
        plan(card, [1], ["fp32"], "small", ("attn_decode",), "flash")
    folder = run("cpu", str(TINY), [1], ["fp32"], "small", tmp_path / "p", families=("attn_decode",),
                 progress=False, attention="contiguous")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["attention"] == "contiguous" and meta["block_size"] == 0 and "contiguous" in " ".join(meta["notes"])
    assert {r["block_size"] for r in read_rows(folder / "attn_decode.csv")} == {0}
    with pytest.raises(ProfileError, match="holds contiguous decode-attention rows; profile --attention paged"):
        run("cpu", str(TINY), [1], ["fp32"], "small", tmp_path / "p", families=("attn_decode",), progress=False)
    run("cpu", str(TINY), [1], ["fp32"], "small", tmp_path / "p", families=("sampling",), progress=False)
    assert json.loads((folder / "meta.json").read_text())["attention"] == "contiguous"  # the rows' variant kept
    from calibration.fit import fit
    from sim.catalog import get_hardware
    from sim.cost.profiled import load_profiled_cost_model

    fitted = fit(folder, tmp_path / "f")
    assert json.loads((fitted / "meta.json").read_text())["attention"] == "contiguous"
    cm = load_profiled_cost_model(card, get_hardware(str(ROOT / "calibration" / "cards" / "cpu-host.yaml")),
                                  profiles_dir=str(fitted), dtype="fp32", act_dtype="fp32")
    assert cm.decode_attention == "contiguous"
