"""Trace readers: every format from small files written here, broken variants, transformations,
and the published figures of the shared traces (skipped when ../shared/traces is absent)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from sim.errors import TraceError
from sim.workload import build_workload
from sim.workload.config import SessionConfig, TraceConfig, WorkloadConfig
from sim.workload.stats import plot_trace_stats, trace_stats
from sim.workload.traces import detect_format, estimate_tokens

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,10,1
"""
BURST = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,Conversation log
130,ChatGPT,100,20,120,API log
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def read(path, info=None, seed=0, sessions=None, **trace):
    cfg = WorkloadConfig(trace=TraceConfig(path=path, **trace), sessions=sessions)
    w = build_workload(cfg, max_context=10**6, rng=np.random.default_rng(seed))
    reqs = list(w)
    if info is not None:
        info.update(w.info)
    return reqs


def test_azure_seven_fractional_digits(tmp_path):
    info = {}
    r = read(write(tmp_path, "a.csv", AZURE), info)
    assert [x.id for x in r] == [0, 1, 2]
    assert r[0].arrival_s == 0.0
    assert r[1].arrival_s == pytest.approx(4.314579)
    assert r[2].arrival_s == pytest.approx(4.31941)
    assert (r[0].prompt_tokens, r[0].output_tokens) == (374, 44)
    assert info["format"] == "azure" and info["requests"] == 3


def test_azure_2024_timezone_suffix_and_day_change(tmp_path):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 23:59:59.500000+00:00,5,6\n2024-05-11 00:00:00.25+00:00,7,8\n"
    r = read(write(tmp_path, "a.csv", text))
    assert r[1].arrival_s == pytest.approx(0.75)


def test_burstgpt_failed_rows_counted_and_filters(tmp_path):
    path = write(tmp_path, "b.csv", BURST)
    info = {}
    r = read(path, info)
    assert [(x.arrival_s, x.prompt_tokens, x.output_tokens) for x in r] == [(0, 472, 18), (113, 417, 276), (125, 100, 20)]
    assert info["skipped_failed_rows"] == 1 and info["format"] == "burstgpt"
    info = {}
    r = read(path, info, model_filter=["ChatGPT"], log_type_filter=["Conversation log"])
    assert [x.prompt_tokens for x in r] == [472]
    assert info["filtered_rows"] == 2 and info["skipped_failed_rows"] == 1


def test_mooncake_hash_ids(tmp_path):
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
            {"timestamp": 2500, "input_length": 100, "output_length": 3, "hash_ids": [0]}]
    r = read(write(tmp_path, "m.jsonl", "".join(json.dumps(x) + "\n" for x in rows)))
    assert r[0].block_hashes == (0, 1) and r[0].hash_block_tokens == 512
    assert r[1].arrival_s == 2.5 and r[1].prompt_tokens == 100


def test_generic_csv_and_jsonl_optional_fields(tmp_path):
    csv_text = "arrival_s,prompt_tokens,output_tokens,session_id,priority,slo_class,tenant,max_output_tokens\n" \
               "1.5,10,2,s1,-1,gold,acme,64\n2.0,20,3,,,,,\n"
    r = read(write(tmp_path, "g.csv", csv_text))
    assert (r[0].arrival_s, r[0].session_id, r[0].priority, r[0].slo_class, r[0].tenant, r[0].max_output_tokens) == \
        (0.0, "s1", -1, "gold", "acme", 64)
    assert (r[1].arrival_s, r[1].session_id, r[1].priority, r[1].max_output_tokens) == (0.5, None, 0, None)
    jl = '{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 1, "tenant": "t"}\n\n{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2}\n'
    r = read(write(tmp_path, "g.jsonl", jl))
    assert [(x.prompt_tokens, x.tenant) for x in r] == [(4, "t"), (5, None)]


def sharegpt_data():
    return [
        {"id": "c1", "conversations": [{"from": "human", "value": "a" * 40}, {"from": "gpt", "value": "b" * 20},
                                       {"from": "human", "value": "c" * 8}, {"from": "gpt", "value": "d" * 4}]},
        {"id": "c2", "conversations": [{"from": "human", "value": "hello"}]},  # unanswered
        {"id": "c3", "conversations": [{"from": "system", "value": "s" * 400}, {"from": "human", "value": "q" * 7},
                                       {"from": "gpt", "value": "x"}]},
    ]


def test_sharegpt_sessions_history_and_hashes(tmp_path):
    path = write(tmp_path, "s.json", json.dumps(sharegpt_data(), indent=2))
    info = {}
    r = read(path, info, sessions=SessionConfig(think_time_s=5.0))
    by = {(x.session_id, x.prompt_tokens): x for x in r}
    assert set(by) == {("c1", 10), ("c1", 17), ("c3", 102)}
    t1, t2 = by[("c1", 10)], by[("c1", 17)]
    assert (t1.output_tokens, t2.output_tokens) == (5, 1)  # 10 + 5 history + 2 new tokens = 17
    assert t2.arrival_s > t1.arrival_s
    assert t1.hash_block_tokens == 64 and len(by[("c3", 102)].block_hashes) == 2
    assert info["unanswered_turns"] == 1 and info["conversations_without_answer"] == 1
    assert [x.id for x in r] == [0, 1, 2] and r == sorted(r, key=lambda x: x.arrival_s)
    # JSONL variant and a one-line JSON list give the same requests
    assert read(write(tmp_path, "s.jsonl", "".join(json.dumps(c) + "\n" for c in sharegpt_data())),
                sessions=SessionConfig(think_time_s=5.0)) == r
    assert read(write(tmp_path, "s1.json", json.dumps(sharegpt_data())), sessions=SessionConfig(think_time_s=5.0)) == r


def test_token_estimator():
    assert [estimate_tokens(s) for s in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]


def test_detect_formats(tmp_path):
    assert detect_format(write(tmp_path, "a.csv", AZURE)) == "azure"
    assert detect_format(write(tmp_path, "b.csv", BURST)) == "burstgpt"
    assert detect_format(write(tmp_path, "s.json", json.dumps(sharegpt_data()))) == "sharegpt"
    with pytest.raises(TraceError, match=r"x.csv, line 1: unrecognised header"):
        detect_format(write(tmp_path, "x.csv", "a,b,c\n1,2,3\n"))
    with pytest.raises(TraceError, match="empty"):
        read(write(tmp_path, "e.csv", ""))
    with pytest.raises(TraceError, match="no requests"):
        read(write(tmp_path, "h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"))
    with pytest.raises(TraceError, match="no such trace file"):
        read(str(tmp_path / "missing.csv"))


def test_gzip(tmp_path):
    p = tmp_path / "a.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write(AZURE)
    assert len(read(str(p))) == 3


BROKEN = [
    ("a.csv", AZURE.replace("374,44", "374,0"), 2, "GeneratedTokens '0' must be at least 1"),
    ("a.csv", AZURE.replace("2023-11-16 18:15:50.9951690", "2023-11-16 18:15:5x"), 3, "TIMESTAMP"),
    ("a.csv", AZURE.replace("10,1", "10"), 4, "2 fields where the header has 3"),
    ("a.csv", AZURE.replace("396", "-3"), 3, "ContextTokens '-3' must be at least 1"),
    ("b.csv", BURST.replace("417", "4.5"), 4, "Request tokens '4.5' is not an integer"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 6, "output_length": 5, "hash_ids": []}\n{"timestamp": 1, "input_length": 6\n', 2, "not valid JSON"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 6, "output_length": 5, "hash_ids": []}\n{"timestamp": 1, "input_length": 6, "output_length": 5}\n', 2, "missing key 'hash_ids'"),
    ("g.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,abc,1\n", 3, "prompt_tokens 'abc'"),
    ("g.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\nnan,1,1\n", 3, "arrival_s 'nan'"),
    ("s.jsonl", json.dumps(sharegpt_data()[0]) + "\n" + '{"id": 1, "conversations": [{"from": "robot", "value": "x"}]}\n', 2, "unknown speaker"),
]


@pytest.mark.parametrize("name,text,line,msg", BROKEN)
def test_broken_rows_name_file_line_and_value(tmp_path, name, text, line, msg):
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError) as e:
        read(path, reorder_window_s=0)
    assert f"{name}, line {line}:" in str(e.value) and msg in str(e.value)
    info = {}
    r = read(path, info, skip_bad=True)
    assert info["skipped_bad_rows"] == 1 and info["bad_row_lines"] == [line] and len(r) >= 1


def test_broken_json_list_always_raises(tmp_path):
    path = write(tmp_path, "s.json", '[\n{"id": 1, "conversations": []},\n{"id": 2, "conv\n')
    with pytest.raises(TraceError, match=r"s.json, line 3: not valid JSON"):
        read(path, skip_bad=True)


def test_disorder_reorder_window_and_rejection(tmp_path):
    text = "arrival_s,prompt_tokens,output_tokens\n0,1,1\n2,2,1\n1.5,3,1\n3,4,1\n0.5,5,1\n"
    path = write(tmp_path, "g.csv", text)
    with pytest.raises(TraceError, match=r"g.csv, line 4: timestamp -0.5 s behind"):
        read(path, reorder_window_s=0)
    with pytest.raises(TraceError, match=r"g.csv, line 6: timestamp"):
        read(path, reorder_window_s=1.0)
    info = {}
    r = read(path, info, reorder_window_s=1.0, skip_bad=True)
    assert [x.prompt_tokens for x in r] == [1, 3, 2, 4] and info["reordered_rows"] == 1 and info["bad_row_lines"] == [6]
    assert [x.prompt_tokens for x in read(path, reorder_window_s=10)] == [1, 5, 3, 2, 4]


GEN = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{t},{i + 1},1\n" for i, t in enumerate([10, 11, 12, 14, 18, 20]))


def test_window_rate_scale_and_cap(tmp_path):
    path = write(tmp_path, "g.csv", GEN)
    info = {}
    r = read(path, info, window_start_s=1, window_end_s=8)
    assert [(x.id, x.arrival_s, x.prompt_tokens) for x in r] == [(0, 0, 2), (1, 1, 3), (2, 3, 4)]
    assert info["outside_window"] == 1 and "window end" in info["stopped_early"]
    r = read(path, rate_scale=2)
    assert [x.arrival_s for x in r] == [0, 0.5, 1, 2, 4, 5]
    r = read(path, num_requests=2, window_start_s=2)
    assert [(x.arrival_s, x.prompt_tokens) for x in r] == [(0, 3), (2, 4)]


def test_rate_rescales_to_count_over_duration(tmp_path):
    r = read(write(tmp_path, "g.csv", GEN), rate=3.0)
    assert len(r) / (r[-1].arrival_s - r[0].arrival_s) == pytest.approx(3.0)
    assert r[1].arrival_s == pytest.approx(1 * 6 / 30)


def test_sample_fraction_seeded(tmp_path):
    text = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i},{i + 1},1\n" for i in range(2000))
    path = write(tmp_path, "g.csv", text)
    info = {}
    a = read(path, info, seed=3, sample_fraction=0.25)
    assert a == read(path, seed=3, sample_fraction=0.25)
    assert 400 < len(a) < 600 and info["sampled_out"] + len(a) == 2000
    assert [x.id for x in a] == list(range(len(a)))


def test_workload_reiterates_identically(tmp_path):
    cfg = WorkloadConfig(trace=TraceConfig(path=write(tmp_path, "g.csv", GEN), sample_fraction=0.5))
    w = build_workload(cfg, max_context=100, rng=np.random.default_rng(1))
    assert list(w) == list(w) and w.info["requests"] == len(list(w))


def test_stats_and_plots_small(tmp_path):
    s = trace_stats(write(tmp_path, "g.csv", GEN), keep_arrays=True)
    assert s["requests"] == 6 and s["duration_s"] == 10 and s["mean_rate_per_s"] == 0.6
    assert s["prompt_tokens"]["median"] == 3.5 and s["output_tokens"]["max"] == 1
    files = plot_trace_stats(s, tmp_path / "fig")
    assert sorted(p.name for p in files) == ["arrivals.png", "arrivals.svg", "lengths.png", "lengths.svg"]


def test_cli_trace_stats(tmp_path, capsys):
    from sim.cli import main

    assert main(["trace", "stats", write(tmp_path, "g.csv", GEN), "--out", str(tmp_path / "o")]) == 0
    assert "requests  6" in capsys.readouterr().out
    assert json.loads((tmp_path / "o" / "stats.json").read_text())["requests"] == 6
    assert main(["trace", "stats", str(tmp_path / "nope.csv")]) == 2


def shared(name):
    p = SHARED / name
    if not p.is_file():
        pytest.skip(f"{p} absent: the public traces live in ../shared/traces beside the repository")
    return str(p)


def test_azure_conv_published_figures():
    s = trace_stats(shared("AzureLLMInferenceTrace_conv.csv"))
    assert s["requests"] == 19366 and round(s["duration_s"]) == 3502 and round(s["mean_rate_per_s"], 2) == 5.53
    p, o = s["prompt_tokens"], s["output_tokens"]
    assert (round(p["mean"]), round(p["median"]), round(p["p99"])) == (1155, 1020, 4142)
    assert (round(o["mean"]), round(o["median"]), round(o["p99"])) == (211, 129, 601)


def test_azure_code_and_mooncake_published_figures():
    s = trace_stats(shared("AzureLLMInferenceTrace_code.csv"))
    assert s["requests"] == 8819 and round(s["duration_s"]) == 3436
    assert (round(s["prompt_tokens"]["mean"]), round(s["prompt_tokens"]["median"])) == (2048, 1469)
    r = read(shared("mooncake_conversation_trace.jsonl"))
    assert len(r) == 12031 and round(np.mean([x.prompt_tokens for x in r])) == 12035
    assert all(len(x.block_hashes) == -(-x.prompt_tokens // 512) for x in r)


def test_workload_modules_import_one_way_and_at_the_top():
    """No function-local imports between sim.workload modules, and no cycle among them."""
    import ast

    root = Path(__file__).resolve().parents[1] / "sim" / "workload"
    graph = {}
    for f in root.glob("*.py"):
        tree = ast.parse(f.read_text())
        top = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sim.workload."):
                assert node in tree.body, f"{f.name}: function-local import of {node.module}"
                top.add(node.module.rsplit(".", 1)[1])
        graph[f.stem] = top
    seen, done = set(), set()

    def visit(m, path):
        assert m not in seen or m in done, f"import cycle: {' -> '.join(path + [m])}"
        if m in done:
            return
        seen.add(m)
        for n in graph.get(m, ()):
            visit(n, path + [m])
        done.add(m)

    for m in graph:
        visit(m, [])


def test_a_new_trace_format_is_one_table_entry(tmp_path, monkeypatch):
    from sim.workload import traces

    def read_tsv(f, cfg, info, bad, rng):
        next(f)
        for line, s in enumerate(f, 2):
            info["rows"] += 1
            t, p, o = s.split("\t")
            yield float(t), line, int(p), int(o), None

    fmt = traces.TraceFormat("tsv", "TSV", ("csv",), ("t\tp\to",), read_tsv)
    monkeypatch.setitem(traces.FORMATS, "tsv", fmt)
    path = write(tmp_path, "x.tsv", "t\tp\to\n0.5\t10\t3\n1.5\t20\t4\n")
    assert detect_format(path) == "tsv"
    reqs = list(build_workload(WorkloadConfig(trace=TraceConfig(path=str(path))), max_context=10_000,
                               rng=np.random.default_rng(0)))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in reqs] == [(0.0, 10, 3), (1.0, 20, 4)]


def test_unknown_trace_format_is_one_clear_error(tmp_path):
    from sim.config import load_config
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"workload.trace.format: unknown trace format 'azur'; did you mean azure"):
        load_config({"workload": {"trace": {"path": "x.csv", "format": "azur"}}})
    cfg = WorkloadConfig(trace=TraceConfig(path=str(write(tmp_path, "a.csv", AZURE)), format="nope"))
    with pytest.raises(TraceError, match="unknown trace format 'nope' .known: auto, azure, burstgpt"):
        list(build_workload(cfg, max_context=10_000, rng=np.random.default_rng(0)))


def test_poisson_arrivals_keep_the_requests_and_the_rate(tmp_path):
    from sim.workload import TraceConfig, WorkloadConfig
    from sim.workload.traces import read_trace_requests

    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:{i // 60:02d}:{i % 60:02d}.0000000,{10 + i},{1 + i % 7}\n" for i in range(400)))

    def reqs(arrivals, seed, **kw):
        cfg = WorkloadConfig(trace=TraceConfig(path=str(path), arrivals=arrivals, **kw))
        return list(read_trace_requests(cfg, {}, np.random.default_rng(seed)))

    recorded, a, b = reqs("recorded", 0), reqs("poisson", 0), reqs("poisson", 1)
    assert [(r.prompt_tokens, r.output_tokens) for r in a] == [(r.prompt_tokens, r.output_tokens) for r in recorded]
    assert [r.arrival_s for r in a] == [r.arrival_s for r in reqs("poisson", 0)]  # the seed decides
    assert [r.arrival_s for r in a] != [r.arrival_s for r in b]
    assert a[0].arrival_s == 0.0 and all(x.arrival_s <= y.arrival_s for x, y in zip(a, a[1:]))
    gaps = np.diff([r.arrival_s for r in a])
    assert gaps.mean() == pytest.approx(399 / 400, rel=0.15)  # the recorded mean gap: 1 s (count / span)
    assert np.std(gaps) / gaps.mean() == pytest.approx(1.0, abs=0.2)  # exponential gaps
    fast = reqs("poisson", 0, rate=4.0)
    assert np.diff([r.arrival_s for r in fast]).mean() == pytest.approx(0.25 * 399 / 400, rel=0.15)
