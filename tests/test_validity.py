"""`hybridbench validity`: quality with its interval, the share cut at the budget, the share with
no answer and token counts, read from run folders alone."""

from __future__ import annotations

import json

from harness.cli.main import main
from harness.evaluation.validity import run_folders, validity


def _run(folder, records, router="small", task="gsm8k"):
    folder.mkdir(parents=True)
    manifest = {"task": task, "router": router, "metric": "exact_match",
                "decode": {"max_new_tokens": 8}, "model_sources": {"small": "default"}}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _record(i, score, stop, extracted, n_tokens):
    return {"example_id": f"gsm8k/test/{i}", "scores": {"exact_match": score, "extracted": extracted},
            "generation": {"stop_reason": stop, "token_ids": list(range(n_tokens)),
                           "provenance": [0] * n_tokens}}  # fmt: skip


def test_validity_rows_count_cuts_and_missing_answers(tmp_path, capsys):
    records = [_record(0, 1.0, "eos", 1.0, 4), _record(1, 0.0, "max_tokens", 0.0, 8),
               _record(2, 1.0, "eos", 1.0, 6), _record(3, 0.0, "eos", 1.0, 2)]  # fmt: skip
    _run(tmp_path / "runs" / "gsm8k-small", records)
    (folder,) = run_folders([str(tmp_path / "runs")])
    row = validity(folder)
    assert (row["n"], row["quality"], row["cut"], row["no_answer"]) == (4, 0.5, 0.25, 0.25)
    assert row["tokens"] == 5 and row["max_tokens"] == 8 and row["budget"] == 8
    assert row["ci"][0] <= 0.5 <= row["ci"][1]
    assert main(["validity", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "| gsm8k-small | 4 | exact_match 0.500 [" in out and "25.0% of 8" in out


def test_validity_of_nothing_is_one_error_line(tmp_path, capsys):
    assert main(["validity", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no run folders") and len(err.strip().splitlines()) == 1


def test_validity_names_a_run_by_its_task_where_its_folder_does_not(tmp_path, capsys):
    records = [_record(0, 1.0, "eos", 1.0, 4)]
    for task in ("gsm8k", "mbpp"):
        _run(tmp_path / "published" / task / "small__default", records, task=task)
    assert main(["validity", str(tmp_path / "published")]) == 0
    out = capsys.readouterr().out
    assert "| gsm8k/small__default | 1 |" in out and "| mbpp/small__default | 1 |" in out
