"""The command line: help text, settings files, error messages, the quick run."""

import json
import sys

import pytest

from dgsgld.__main__ import build_parser, main

RUN_OPTIONS = [
    "--network",
    "--batch-size",
    "--trials",
    "--num-steps",
    "--step-size",
    "--sgld-step-size",
    "--seed",
]
REPRODUCE_OPTIONS = ["--out", "--trials", "--seed", "--config", "--no-plots", "--quiet"]


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_help_documents_every_option(capsys):
    top = _help(["--help"], capsys)
    assert "run" in top and "reproduce" in top
    text = _help(["run", "--help"], capsys)
    for option in RUN_OPTIONS:
        assert option in text
    text = _help(["sweep", "--help"], capsys)
    for option in ["--seeds", "--out", "--trials", "--config", "--quiet"]:
        assert option in text
    text = _help(["reproduce", "--help"], capsys)
    for option in REPRODUCE_OPTIONS:
        assert option in text
    for target in ["fig2a", "fig3c", "all", "theory"]:
        assert target in text
    # Every option of the parser carries a help string.
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for command in sub.choices.values():
        for action in command._actions:
            assert action.help, (command.prog, action.dest)


def test_bad_arguments_exit_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "fig9", "--out", "x"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["run", "--trials", "0"])
    assert "positive integer" in capsys.readouterr().err


def test_unknown_config_key_is_an_error_naming_it(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[fig2a]\nnum_stepz = 10\n")
    code = main(["reproduce", "fig2a", "--out", str(tmp_path / "out"), "--config", str(cfg)])
    err = capsys.readouterr().err
    assert code == 2
    assert "'num_stepz'" in err and "valid keys" in err and "num_steps" in err
    assert not (tmp_path / "out" / "fig2a.json").exists()


def test_theory_target_calls_the_report(tmp_path, monkeypatch, capsys):
    import types

    calls = []
    fake = types.ModuleType("dgsgld.experiments.theory_report")
    fake.theory_report = lambda out_dir, **kw: calls.append((out_dir, kw))
    monkeypatch.setitem(sys.modules, "dgsgld.experiments.theory_report", fake)
    assert (
        main(["reproduce", "theory", "--out", str(tmp_path), "--seed", "3", "--trials", "7"]) == 0
    )
    assert calls == [(tmp_path, {"seed": 3, "num_chains": 7})]

    monkeypatch.setitem(sys.modules, "dgsgld.experiments.theory_report", None)  # import fails
    assert main(["reproduce", "theory", "--out", str(tmp_path)]) == 2
    assert "theory report is not available" in capsys.readouterr().err


@pytest.mark.slow
def test_run_prints_the_table(capsys):
    code = main(["run", "--trials", "8", "--num-steps", "5"])
    out = capsys.readouterr().out
    assert code == 0
    for name in ["DIGing-SGLD", "DE-SGLD", "SGLD (centralized)", "exact draws", "wall time"]:
        assert name in out
    row = next(line for line in out.splitlines() if line.startswith("DIGing-SGLD"))
    step, mean, low, high = (float(v) for v in row.split()[1:])
    assert step == 0.008 and 0 < low <= mean <= high


def test_run_reports_bad_batch_size(capsys):
    assert main(["run", "--batch-size", "9", "--trials", "4", "--num-steps", "2"]) == 2
    assert "batch_size" in capsys.readouterr().err


@pytest.mark.slow
def test_reproduce_writes_results(tmp_path, capsys):
    cfg = tmp_path / "small.toml"
    cfg.write_text("num_steps = 10\nnum_step_sizes = 3\n[fig2]\ngradient_iterations = 2\n")
    out = tmp_path / "out"
    assert (
        main(
            [
                "reproduce",
                "fig2a",
                "--out",
                str(out),
                "--trials",
                "16",
                "--config",
                str(cfg),
                "--quiet",
            ]
        )
        == 0
    )
    data = json.loads((out / "fig2a.json").read_text())
    assert data["config"]["trials"] == 16 and data["config"]["num_steps"] == 10
    assert len(data["algorithms"]["DE-SGLD"]["std"]) == 11
    assert (out / "fig2a.png").exists() and (out / "summary.md").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["figures"]["fig2a"]["DIGing-SGLD"]["step_size"] > 0
