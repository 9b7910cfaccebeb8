"""The command lines: the library's (``python -m dgsgld run``/``launch``) and the repository's
application (``python -m experiments reproduce``/``sweep``/``bench``): help text, settings
files, error messages, the main job."""

import json
import os
import sys

import numpy as np
import pytest
from _commands import application_cli, library_cli, main

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
    assert "run" in top and "launch" in top
    top = application_cli.main.__doc__ and _help_of(application_cli, capsys)
    assert "reproduce" in top and "sweep" in top and "bench" in top
    text = _help(["run", "--help"], capsys)
    for option in RUN_OPTIONS:
        assert option in text
    text = _help(["sweep", "--help"], capsys)
    for option in ["--seeds", "--out", "--trials", "--config", "--quiet", "--panels",
                   "--methods", "--update"]:
        assert option in text
    text = _help(["reproduce", "--help"], capsys)
    for option in REPRODUCE_OPTIONS:
        assert option in text
    for target in ["fig2a", "fig3c", "all", "theory"]:
        assert target in text
    # Every option of both parsers carries a help string.
    for parser in (library_cli.build_parser(), application_cli.build_parser()):
        sub = next(a for a in parser._actions if a.dest == "command")
        for command in sub.choices.values():
            for action in command._actions:
                assert action.help, (command.prog, action.dest)


def _help_of(cli, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_bad_arguments_exit_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "fig9", "--out", "x"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["run", "--trials", "0"])
    assert "positive integer" in capsys.readouterr().err


def test_methods_only_options_are_refused_elsewhere(tmp_path, capsys):
    code = main(["sweep", "fig2a", "--panels", "fig2a", "--out", str(tmp_path / "out")])
    assert code == 2
    assert "`sweep methods` only" in capsys.readouterr().err
    assert not (tmp_path / "out" / "sweep_fig2a.json").exists()


def test_consensus_is_refused_outside_the_communication_experiment(tmp_path, capsys):
    assert main(["reproduce", "fig2a", "--out", str(tmp_path / "a"), "--consensus", "0.1"]) == 2
    assert "--consensus applies to the communication experiment" in capsys.readouterr().err
    assert main(["reproduce", "communication", "--out", str(tmp_path / "b"), "--small",
                 "--consensus", "2"]) == 2
    assert "`consensus` must be a number in (0, 1]; got 2.0" in capsys.readouterr().err
    assert not list((tmp_path / "a").iterdir()) and not list((tmp_path / "b").iterdir())


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
    fake = types.ModuleType("experiments.theory_report")
    fake.theory_report = lambda out_dir, **kw: calls.append((out_dir, kw))
    monkeypatch.setitem(sys.modules, "experiments.theory_report", fake)
    assert (
        main(["reproduce", "theory", "--out", str(tmp_path), "--seed", "3", "--trials", "7"]) == 0
    )
    assert calls == [(tmp_path, {"seed": 3, "num_chains": 7})]

    monkeypatch.setitem(sys.modules, "experiments.theory_report", None)  # import fails
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
    step, mean, low, high, kb = (float(v) for v in row.split()[1:])
    assert step == 0.008 and 0 < low <= mean <= high
    # Bytes from the barbell's own snapshots: each agent sends x and y, 6 float32 entries
    # (24 B) each, to every out-neighbour of snapshots 0-4, averaged over the 20 agents.
    from dgsgld.posteriors.problems import derive_seeds
    from experiments.configs import LinearRegressionConfig
    from experiments.figures import make_network

    schedule = make_network(LinearRegressionConfig(network="barbell", trials=8, num_steps=5),
                            derive_seeds(0)["network"])
    links = sum(int((np.asarray(schedule.matrix_at(k)) != 0).sum()) - 20 for k in range(5))
    assert kb == round(links * 2 * 24 / 20 / 1e3, 1), (kb, links)


@pytest.mark.slow  # fast twin: tests/cli/test_cli.py::test_run_reports_bad_batch_size
def test_the_run_command_loads_neither_networkx_nor_optax():
    # Loaded where they are used (graphs given as networkx objects, gradient tuning), not by
    # `python -m dgsgld run`'s imports or its network.
    import subprocess

    code = ("import sys, dgsgld, dgsgld.__main__, dgsgld._cli.main_job, dgsgld.networks as n; "
            "n.barbell(20, seed=0); n.lollipop(20, seed=0); "
            "print(sorted(m for m in ('networkx', 'optax') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(__file__)))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"


def test_star_import_gives_exactly_the_public_names():
    import types

    import dgsgld

    names = {}
    exec("from dgsgld import *", names)  # noqa: S102 - what a user's star import binds
    names.pop("__builtins__")
    assert sorted(names) == sorted(dgsgld.__all__) and len(set(dgsgld.__all__)) == len(names)
    # Every class and function at top level is listed (the rooms are modules, reached as
    # attributes); the placements are those of their modules.
    objects = {n for n, v in vars(dgsgld).items()
               if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert set(dgsgld.__all__) == objects
    assert (dgsgld.Chains, dgsgld.Agents, dgsgld.Processes) == (
        dgsgld.parallel.devices.Chains, dgsgld.parallel.devices.Agents,
        dgsgld.parallel.processes.Processes)


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


# -- reliability: errors before computing, one line each -----------------------


def _no_compute(monkeypatch):
    """Make every computation fail loudly: the checks must refuse before any of it."""
    import experiments as experiments
    from dgsgld._cli import main_job

    def computed(*args, **kwargs):
        raise AssertionError("computed before the arguments were checked")

    monkeypatch.setattr(main_job, "main_job", computed)
    for name in ("reproduce", "seed_sweep"):
        monkeypatch.setattr(experiments, name, computed)


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err.strip()


@pytest.mark.reliability
@pytest.mark.parametrize("command", ["reproduce fig2a", "sweep fig2a", "reproduce theory"])
def test_out_that_is_a_file_is_refused_before_computing(tmp_path, monkeypatch, capsys, command):
    _no_compute(monkeypatch)
    file = tmp_path / "file"
    file.write_text("x")
    assert main([*command.split(), "--out", str(file)]) == 2
    assert _error_line(capsys) == f"error: --out {str(file)!r} is a file, not a directory."


@pytest.mark.reliability
def test_unwritable_out_is_refused_before_computing(tmp_path, monkeypatch, capsys):
    _no_compute(monkeypatch)
    import tempfile

    def read_only(*args, **kwargs):  # what a read-only directory gives (root ignores chmod)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    out = tmp_path / "out"
    assert main(["reproduce", "fig2a", "--out", str(out)]) == 2
    assert _error_line(capsys) == (
        f"error: --out {str(out)!r} is not a writable directory (Permission denied)."
    )


@pytest.mark.reliability
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_out_is_refused(tmp_path, monkeypatch, capsys):
    _no_compute(monkeypatch)
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert main(["reproduce", "fig2a", "--out", str(out)]) == 2
    finally:
        out.chmod(0o755)
    assert "is not a writable directory" in _error_line(capsys)


@pytest.mark.reliability
@pytest.mark.parametrize("argv", [["run", "--trials", "10000000000000"],
                                  ["reproduce", "all", "--trials", "1000000000", "--out", "OUT"],
                                  ["sweep", "fig2a", "--trials", "1000000000", "--out", "OUT"]])
def test_impossible_trials_are_refused_before_computing(tmp_path, monkeypatch, capsys, argv):
    _no_compute(monkeypatch)
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    line = _error_line(capsys)
    assert "needs about" in line and "of memory" in line and line.endswith("lower --trials.")


@pytest.mark.reliability
def test_memory_estimate():
    from dgsgld._cli import check_memory, estimate_bytes

    # 200 chains, 101 kept iterations, 20 agents, d = 6: positions plus 4 state copies.
    assert estimate_bytes(200, 101, 20, 6) == 4 * 200 * 20 * 6 * (101 + 4)
    check_memory(1000, "x", available=1000)
    with pytest.raises(ValueError, match=r"x needs about 1.0 kB of memory .* about 999 bytes is "):
        check_memory(1001, "x", available=999)


@pytest.mark.reliability
@pytest.mark.parametrize("error, line", [
    (RuntimeError("boom\nsecond line"),
     "error: RuntimeError: boom second line (run with --debug for the traceback)"),
    (MemoryError(), "error: out of memory (MemoryError); lower --trials or --num-steps "
                    "(run with --debug for the traceback)"),
    (KeyError("k"), "error: KeyError: 'k' (run with --debug for the traceback)"),
    (FileNotFoundError(2, "No such file or directory", "/x"),
     "error: No such file or directory: /x (run with --debug for the traceback)"),
])
def test_every_error_is_one_line_and_debug_shows_it(monkeypatch, capsys, error, line):
    from dgsgld._cli import main_job

    def fail(**kwargs):
        raise error

    monkeypatch.setattr(main_job, "main_job", fail)
    assert main(["run", "--trials", "4"]) == 2
    assert _error_line(capsys) == line
    with pytest.raises(type(error)):
        main(["--debug", "run", "--trials", "4"])


@pytest.mark.reliability
def test_command_line_process_prints_one_error_line(tmp_path):
    import subprocess

    file = tmp_path / "file"
    file.write_text("x")
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(__file__)))}
    proc = subprocess.run([sys.executable, "-m", "experiments", "reproduce", "fig2a", "--out",
                           str(file)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == f"error: --out {str(file)!r} is a file, not a directory.\n"
