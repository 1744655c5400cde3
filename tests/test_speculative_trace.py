"""Speculative acceptance measured per request (``speculative.acceptance: trace`` or a column
name): each request's rate is read from its trace row and carried on the request; exact token
counts on a tiny case, the column read from CSV and JSONL traces, bad rows named by line."""
import json

import pytest

from conftest import tiny_config
from sim import simulate
from sim.errors import ConfigError, TraceError
from sim.workload.config import TraceConfig, WorkloadConfig
from sim.workload.traces import read_trace_requests


def two_requests(tmp_path, column="acceptance", spec_acceptance="trace"):
    path = tmp_path / "two.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens,{column}\n0.0,100,9,1.0\n0.0,100,9,0\n")
    return simulate(tiny_config(workload={"trace": {"path": str(path)}},
                                speculative={"method": "eagle", "num_speculative_tokens": 3,
                                             "acceptance": spec_acceptance}))


def test_each_request_drafts_at_its_own_measured_rate(tmp_path):
    """Both prompts in the first step; then request 0 (rate 1) emits 4 tokens a verification
    and finishes after two, request 1 (rate 0) emits 1 a verification and needs eight."""
    res = two_requests(tmp_path)
    req = res.requests.set_index("request_id")
    assert list(req["generated_tokens"]) == [9, 9]
    assert len(res.steps) == 9 and list(res.steps["batch_size"]) == [2, 2, 2] + [1] * 6
    s = res.summary["speculative"]
    assert s["acceptance_column"] == "acceptance" and s["acceptance_rates"] == []
    assert s["verifications"] == 10 and s["accepted_draft_tokens"] == 6
    assert req.loc[0, "finish_s"] < req.loc[1, "finish_s"]


def test_a_column_given_by_name(tmp_path):
    res = two_requests(tmp_path, column="accept_rate", spec_acceptance="accept_rate")
    assert res.summary["speculative"]["accepted_draft_tokens"] == 6


def test_jsonl_traces_carry_the_rate_on_the_request(tmp_path):
    path = tmp_path / "mc.jsonl"
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "acceptance": 0.25},
            {"timestamp": 10, "input_length": 700, "output_length": 5, "hash_ids": [1, 3], "acceptance": 1}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tc = TraceConfig(path=str(path), acceptance_column="acceptance")
    specs = list(read_trace_requests(WorkloadConfig(trace=tc), {}))
    assert [s.acceptance for s in specs] == [0.25, 1.0] and specs[0].block_hashes == (1, 2)
    assert specs[0].with_output_limit(10).acceptance == 0.25
    plain = list(read_trace_requests(WorkloadConfig(trace=TraceConfig(path=str(path))), {}))
    assert [s.acceptance for s in plain] == [None, None]  # read only when asked for


@pytest.mark.parametrize("cell,match", [("1.5", r"line 3: acceptance '1\.5' is not an acceptance rate in \[0, 1\]"),
                                        ("x", r"line 3: acceptance 'x' is not")])
def test_a_bad_rate_names_its_line(tmp_path, cell, match):
    path = tmp_path / "bad.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens,acceptance\n0.0,10,3,0.5\n1.0,10,3,{cell}\n")
    with pytest.raises(TraceError, match=match):
        list(read_trace_requests(WorkloadConfig(trace=TraceConfig(path=str(path), acceptance_column="acceptance")), {}))


def test_a_missing_column_and_a_missing_trace_are_refused(tmp_path):
    path = tmp_path / "nocol.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,3\n")
    with pytest.raises(TraceError, match=r"line 1: the header lacks column acceptance"):
        simulate(tiny_config(workload={"trace": {"path": str(path)}},
                             speculative={"method": "eagle", "acceptance": "trace"}))
    with pytest.raises(ConfigError, match=r"speculative\.acceptance: 'trace' reads each request's acceptance rate"):
        simulate(tiny_config(speculative={"method": "eagle", "acceptance": "trace"}))
