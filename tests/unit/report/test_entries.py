"""A replay's request entries are made when read (replay/report/entries.py): the document keeps
the outcomes, never a dict per request, and reads, compares and writes like the list a report
file holds."""

from __future__ import annotations

import json

import numpy as np

from replay.judge.diff import RequestDiff
from replay.report.document import report_dict
from replay.report.entries import RequestEntries, outcome_dict
from replay.report.files import write_reports
from replay.report.results import ReplayResult, RequestOutcome


def outcome(i: int, status: str = "identical") -> RequestOutcome:
    ok = status == "identical"
    diff = RequestDiff(status=status, compared=4, first=None, token_position=None,
                       max_ulp=0 if ok else 9, mean_kl=0.0, passed=ok,
                       abs_delta=np.full(4, 0.0 if ok else 0.5), ulp=np.zeros(4, np.int64))
    return RequestOutcome(id=f"g{i}/b0/t0", repeat=0, diff=diff, cached_tokens=16 * i,
                          cached_details={"device": 16 * i}, expected_min_cached=None,
                          cache_problem=None, answer_digest=bytes(range(32)))


def document() -> dict:
    outcomes = [outcome(0), outcome(1, "logprob_drift"), outcome(2)]
    result = ReplayResult(golden="g", server="s", policy="exact", repeats=1, expectation="any",
                          outcomes=outcomes)
    return report_dict(result, golden="g", server="s", policy="exact")


def test_a_replays_document_keeps_its_outcomes_not_an_entry_dict_per_request():
    doc = document()
    assert isinstance(doc["requests"], RequestEntries) and len(doc["requests"]) == 3
    assert all(isinstance(o, RequestOutcome) for o in doc["requests"].outcomes)


def test_entries_read_are_the_outcome_dicts_in_order():
    doc = document()
    outcomes = doc["requests"].outcomes
    assert list(doc["requests"]) == [outcome_dict(o) for o in outcomes]
    assert doc["requests"][1] == outcome_dict(outcomes[1]) and doc["requests"][-1]["id"] == "g2/b0/t0"
    assert doc["requests"][1:] == [outcome_dict(o) for o in outcomes[1:]]


def test_entries_equal_the_list_a_report_file_holds_both_ways():
    doc = document()
    loaded = json.loads(json.dumps(list(doc["requests"])))
    assert doc["requests"] == loaded and loaded == doc["requests"]
    assert doc["requests"] != loaded[:2]


def test_an_entry_changed_in_place_leaves_the_document_as_judged():
    doc = document()
    doc["requests"][1]["passed"] = True
    doc["requests"][1]["cached_tokens_details"]["device"] = 0  # held once for many requests
    assert doc["requests"][1]["passed"] is False and doc["verdict"] == "fail"
    assert doc["requests"][1]["cached_tokens_details"] == {"device": 16}


def test_the_answer_digest_is_written_as_64_hex_digits():
    assert document()["requests"][0]["answer_sha256"] == bytes(range(32)).hex()


def test_the_report_file_is_the_document_as_json_dumps_writes_it(tmp_path):
    doc = document()
    write_reports(doc, report=tmp_path / "r.json")
    plain = {**doc, "requests": list(doc["requests"])}
    assert (tmp_path / "r.json").read_text() == json.dumps(plain, indent=1) + "\n"
