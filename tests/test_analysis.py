
import pytest

from scheda.analysis.core import run_label

from helpers import STAGES, TINY, compose_cfg, run_module


def _runs(cifar_arrays, tmp_path):
    from omegaconf import OmegaConf

    from scheda.run import run

    dirs = {}
    for name, overrides in {"da": ["schedule=constant", "schedule.nu=0.3", "schedule.epochs=2"],
                            "scheda": STAGES, "da_seed": ["schedule=constant", "schedule.epochs=1", "seed=7"]}.items():
        cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, *overrides, "evaluate.enabled=false", "logger=none"])
        run(cfg, tmp_path / name)
        (tmp_path / name / ".hydra").mkdir()
        OmegaConf.save(cfg, tmp_path / name / ".hydra" / "config.yaml")
        dirs[name] = tmp_path / name
    return dirs


def test_run_labels_and_scripts(cifar_arrays, tmp_path):
    runs = _runs(cifar_arrays, tmp_path)
    assert run_label(runs["da"]) == "DA(0.3)" and run_label(runs["scheda"]) == "ScheDA(0.5->0.2)"
    proc = run_module("scheda.analysis.plot_filters", [runs["da"], runs["scheda"], "--n", "8",
                                                       "--out", tmp_path / "f.png"])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    proc = run_module("scheda.analysis.feature_similarity", [
        "--reference", runs["scheda"], "--baseline", runs["da_seed"], "--da", f"0.3={runs['da']}",
        f"0.5={runs['scheda']}", "--out", tmp_path / "t2.md"])
    assert proc.returncode == 0, proc.stderr
    table = (tmp_path / "t2.md").read_text().splitlines()
    assert table[0] == "| nu | C_nu for ScheDA(0.5->0.2) | C_nu for DA(0.3)* |"
    assert table[2].startswith("| 0.3 | 0 |") and table[3].startswith("| 0.5 | 8 |")  # itself: all 8 units
    assert table[4].startswith("| tied | 0 |")
    assert sum(int(row.split("|")[3]) for row in table[2:]) == 8  # the baseline's units, tied ones included
    proc = run_module("scheda.analysis.feature_similarity", [
        "--reference", runs["scheda"], "--da", f"0.3={runs['da']}", f"0.5={runs['scheda']}", "--measure", "correlation"])
    assert proc.returncode == 0, proc.stderr
    assert "| 0.5 | 8 |" in proc.stdout


def test_concatenation_grid_from_a_fused_sweep(cifar_arrays, tmp_path):
    import json

    from omegaconf import OmegaConf

    from scheda.run import run

    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1",
                       "trainer.parallel.nu=[0.2,0.5]", "trainer.parallel.seed=[1,2]", "evaluate.enabled=false",
                       "logger=none"])
    run(cfg, tmp_path / "sweep")
    proc = run_module("scheda.analysis.concat_eval", ["--sweep", tmp_path / "sweep", "--classifier", "torch_lr",
                                                      "--c-log2-min", "-3", "--c-log2-max", "0",
                                                      "--out", tmp_path / "grid.png"])
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "grid.json").read_text())
    assert report["rows"] == [0.2, 0.5] and report["cols"] == [0.2, 0.5]
    assert sorted((p["a"], p["b"]) for p in report["pairs"]) == [(0.2, 0.2), (0.2, 0.5), (0.5, 0.2), (0.5, 0.5)]
    assert all(p["features"] == 16 for p in report["pairs"])
    assert (tmp_path / "grid.png").read_bytes()[:4] == b"\x89PNG"
    # Two runs given directly: their concatenation and each alone.
    a, b = tmp_path / "sweep" / "models" / "0", tmp_path / "sweep" / "models" / "3"
    proc = run_module("scheda.analysis.concat_eval", [a, b, "--classifier", "torch_lr", "--c-log2-min", "-3",
                                                      "--c-log2-max", "0"])
    assert proc.returncode == 0, proc.stderr
    assert "DA(0.2) + DA(0.5): 16 features" in proc.stdout and proc.stdout.count("alone") == 2
    assert OmegaConf.load(a / "config.yaml").seed == 1


def test_filters_of_a_run_without_an_image_shape_are_drawn_in_the_shape_given(tmp_path):
    """dataset=arrays has no image shape unless given: plot-filters names --image-shape, refuses one
    that does not hold the inputs, and draws one channel in grey (not a colour map)."""
    import numpy as np
    from matplotlib.image import imread

    import scheda

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "mine.npz", train_x=(rng.random((203, 35)) > 0.5).astype("float32"))
    run = scheda.train(["dataset=arrays", f"dataset.root={tmp_path / 'mine.npz'}", "model.hidden=9",
                        "schedule=constant", "schedule.epochs=1", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"])
    out = tmp_path / "f.png"
    proc = run_module("scheda.analysis.plot_filters", [run.dir, "--out", out])
    assert proc.returncode == 1 and not out.exists()
    assert proc.stderr.strip().endswith("give --image-shape C H W (C*H*W = its 35 inputs)"), proc.stderr
    proc = run_module("scheda.analysis.plot_filters", [run.dir, "--image-shape", "1", "6", "6", "--out", out])
    assert proc.returncode == 1 and "holds 36 values, its filters 35" in proc.stderr
    proc = run_module("scheda.analysis.plot_filters", [run.dir, "--image-shape", "1", "5", "7", "--out", out])
    assert proc.returncode == 0, proc.stderr
    pixels = imread(out)[:, :, :3]
    assert pixels.std() > 0.05  # something was drawn
    assert np.allclose(pixels[:, :, 0], pixels[:, :, 1]) and np.allclose(pixels[:, :, 1], pixels[:, :, 2])


def test_a_stopped_concatenation_grid_keeps_its_pairs_and_evaluates_only_the_others(cifar_arrays, tmp_path,
                                                                                     monkeypatch, capsys):
    """Ctrl-C in the third pair of a 3 x 3 grid: one line, exit 130, the two finished pairs in the
    JSON; the same command again evaluates the seven others and gives the grid of one uninterrupted
    invocation; other settings on that JSON are refused, not mixed in."""
    import json

    from scheda.analysis import concat_eval
    from scheda.run import run

    cfg = compose_cfg([f"dataset.root={cifar_arrays}", *TINY, "schedule=constant", "schedule.epochs=1",
                       "trainer.parallel.nu=[0.2,0.4,0.5]", "trainer.parallel.seed=[1,2]", "evaluate.enabled=false",
                       "logger=none"])
    run(cfg, tmp_path / "sweep")
    args = ["--sweep", str(tmp_path / "sweep"), "--classifier", "torch_lr", "--c-log2-min", "-3", "--c-log2-max", "0"]
    assert concat_eval.main([*args, "--out", str(tmp_path / "whole.png")]) == 0
    whole = json.loads((tmp_path / "whole.json").read_text())
    assert len(whole["pairs"]) == 9 and whole["complete"]

    real, calls = concat_eval.Evaluator.evaluate, []

    def stopped_at_the_third(self, runs):
        calls.append(runs)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, runs)

    monkeypatch.setattr(concat_eval.Evaluator, "evaluate", stopped_at_the_third)
    capsys.readouterr()
    assert concat_eval.main([*args, "--out", str(tmp_path / "grid.png")]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"interrupted by SIGINT: 2 of 9 pairs evaluated, kept in {tmp_path / 'grid.json'}; run the same "
                   f"command again to evaluate the others"]
    kept = json.loads((tmp_path / "grid.json").read_text())
    assert len(kept["pairs"]) == 2 and not kept["complete"] and not (tmp_path / "grid.png").exists()
    calls.clear()
    monkeypatch.setattr(concat_eval.Evaluator, "evaluate", lambda self, runs: calls.append(runs) or real(self, runs))
    assert concat_eval.main([*args, "--out", str(tmp_path / "grid.png")]) == 0
    assert len(calls) == 7 and json.loads((tmp_path / "grid.json").read_text()) == whole
    assert (tmp_path / "grid.png").exists()
    assert concat_eval.main([*args[:-1], "1", "--out", str(tmp_path / "grid.png")]) == 1
    assert "grid.json holds a grid of other settings (c_log2_max): give another --out" in capsys.readouterr().err


def test_ctrl_c_in_a_tool_is_one_line(cifar_arrays, tmp_path, monkeypatch, capsys):
    from scheda.analysis import feature_similarity, plot_filters
    from scheda.evaluation import export
    from scheda.runs import gather

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    for module, argv in [(plot_filters, ["run"]), (feature_similarity, ["--reference", "run", "--da", "0.1=run"]),
                         (export, ["run", "--features", str(tmp_path / "f.npz")]),
                         (gather, [str(tmp_path)])]:  # scheda-results, reading a large folder
        monkeypatch.setattr(module, "find_results", interrupted, raising=False)
        monkeypatch.setattr(module, "load_run_model", interrupted, raising=False)
        monkeypatch.setattr(module, "find_checkpoint", interrupted, raising=False)
        monkeypatch.setattr(module, "load_checkpoint", interrupted, raising=False)
        assert module.main(argv) == 130, module
        assert capsys.readouterr().err.strip().splitlines() == [
            "interrupted by SIGINT: no file was left half-written; run the same command again"]


def test_filters_of_a_run_on_text_are_its_units_top_words(tmp_path):
    """dataset=amazon has no image shape: its filters are each unit's words of largest weight, as
    markdown beside --out (it answered "give --image-shape", meaningless for words); --seed's
    sample keeps the units' own numbers."""
    import torch

    import scheda
    from fixture_data import write_amazon_processed

    root = write_amazon_processed(tmp_path / "amazon", n=30)
    run = scheda.train(["dataset=amazon", f"dataset.root={root}",
                        "dataset.vocab_size=40", "model.hidden=7", "schedule=constant", "schedule.epochs=1",
                        "logger=none", "trainer.batch_size=8", f"hydra.run.dir={tmp_path / 'run'}"])
    out = tmp_path / "f.png"
    proc = run_module("scheda.analysis.plot_filters", [run.dir, "--n", "3", "--seed", "4", "--out", out])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "f.md") and not out.exists()
    lines = (tmp_path / "f.md").read_text().splitlines()
    assert lines[0].startswith("## DA(") and lines[2:4] == ["| unit | top words |", "|---|---|"]
    units = torch.randperm(7, generator=torch.Generator().manual_seed(4))[:3].tolist()
    assert [int(line.split("|")[1]) for line in lines[4:]] == units
    assert all(len(line.split("|")[2].split(",")) == 10 for line in lines[4:])


def test_one_run_is_no_concatenation():
    """It evaluated the one run as a 'concatenation' and then again alone."""
    proc = run_module("scheda.analysis.concat_eval", ["some_run"])
    assert proc.returncode == 2 and "give either two or more runs, or --sweep" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--n", "0"], "--n 0: give how many filters to draw, at least 1"),
    (["--image-shape", "0", "32", "32"], "--image-shape 0 32 32: each of C H W must be at least 1"),
])
def test_no_filters_to_draw_is_refused_before_any_run_is_read(args, message):
    """``--n 0`` divided by zero while laying the panels out (a ZeroDivisionError traceback)."""
    proc = run_module("scheda.analysis.plot_filters", ["some_run", *args])
    assert proc.returncode == 2 and proc.stderr.strip().endswith(f": error: {message}"), proc.stderr
