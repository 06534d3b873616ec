import json

from fastpld.cli import main


def test_cli_epsilon_json(capsys):
    assert main(["epsilon", "--sigma", "1.0", "--sampling-probability", "0.01", "--steps", "1000",
                 "--delta", "1e-5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    e = out["epsilon"]
    assert 0 < e["lower"] <= e["estimate"] <= e["upper"]


def test_cli_bad_input_exit_2(capsys):
    assert main(["epsilon", "--sigma", "-1", "--steps", "10", "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err
    assert "sigma" in err and "Traceback" not in err


import importlib.util  # noqa: E402

import pytest  # noqa: E402


def _json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_main_job_human_readable(capsys):
    # the README's main job (fewer steps to stay quick); output format is stable
    assert main(["epsilon", "--sigma", "1.0", "--sampling-probability", "0.01", "--steps", "100",
                 "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out.splitlines()
    # the headline is the certified upper bound (the number to quote), then both bounds
    assert out[0].startswith("epsilon <= ") and "certified upper bound" in out[0] and "lower bound" in out[0]
    up = float(out[0].split()[2])
    lo = float(out[0].split("lower bound")[1].split(",")[0])
    assert 0 < lo <= up
    assert "PoissonSubsampledGaussian" in out[1] and "100 steps" in out[1]


def test_cli_relative_accuracy(capsys):
    assert main(["epsilon", "--sigma", "1.0", "--sampling-probability", "0.01", "--steps", "1000",
                 "--delta", "1e-5", "--rel-error", "1e-3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    e = out["epsilon"]
    assert e["lower"] <= e["upper"] <= e["lower"] * (1 + 1e-3)
    assert out["parameters"]["rel_error"] == 1e-3 and out["parameters"]["method"].startswith("dominance")
    assert main(["epsilon", "--sigma", "1.0", "--steps", "10", "--delta", "1e-5", "--rel-error", "2"]) == 2
    assert "rel_error" in capsys.readouterr().err
    assert main(["epsilon", "--sigma", "1.0", "--steps", "10", "--delta", "1e-5", "--rel-error", "1e-3",
                 "--eps-error", "0.1"]) == 2
    assert "not both" in capsys.readouterr().err


@pytest.mark.parametrize("mech,name", [
    (["--sigma", "5"], "Gaussian"),
    (["--laplace-scale", "20"], "Laplace"),
    (["--laplace-scale", "2", "--sampling-probability", "0.05"], "PoissonSubsampledLaplace"),
    (["--sigma", "1", "--sampling-probability", "0.05", "--neighboring", "remove"], "neighboring='remove'"),
    (["--pure-dp", "0.1"], "PureDP"),
    (["--randomized-response", "0.5", "--num-categories", "4"], "RandomizedResponse"),
    (["--approx-dp", "0.1", "1e-8"], "ApproxDP"),
])
def test_cli_mechanisms_delta_json(capsys, mech, name):
    out = _json(capsys, ["delta"] + mech + ["--steps", "20", "--epsilon", "1.0"])
    d = out["delta"]
    assert 0 <= d["lower"] <= d["estimate"] <= d["upper"] <= 1
    assert name in out["parameters"]["mechanism"] and out["parameters"]["epsilon"] == 1.0


def test_cli_matches_library(capsys):
    import fastpld

    out = _json(capsys, ["epsilon", "--randomized-response", "0.5", "--num-categories", "4", "--steps", "30",
                         "--delta", "1e-6"])
    b = fastpld.compose(fastpld.RandomizedResponse(0.5, 4), 30, delta_error=1e-10).epsilon(1e-6)
    assert out["epsilon"] == {"lower": b.lower, "estimate": b.estimate, "upper": b.upper}


@pytest.mark.parametrize("argv,needle", [
    (["epsilon", "--sigma", "abc", "--steps", "3", "--delta", "1e-5"], "--sigma"),
    (["epsilon", "--steps", "3", "--delta", "1e-5"], "--sigma"),
    (["epsilon", "--sigma", "1", "--pure-dp", "1", "--steps", "3", "--delta", "1e-5"], "only one mechanism"),
    (["epsilon", "--sigma", "1", "--steps", "0", "--delta", "1e-5"], "steps"),
    (["epsilon", "--sigma", "1", "--steps", "3", "--delta", "2"], "delta"),
    (["delta", "--sigma", "1", "--steps", "3", "--epsilon", "-1"], "epsilon"),
    (["epsilon", "--sigma", "1", "--steps", "3"], "--delta"),
    (["epsilon", "--pure-dp", "1", "--sampling-probability", "0.1", "--steps", "3", "--delta", "1e-5"],
     "--sampling-probability"),
    (["epsilon", "--randomized-response", "1", "--num-categories", "1", "--steps", "3", "--delta", "1e-3"],
     "num_categories"),
    (["epsilon", "--sigma", "1", "--sampling-probability", "1.5", "--steps", "3", "--delta", "1e-3"],
     "sampling_probability"),
    (["epsilon", "--sigma", "1", "--steps", "3", "--delta", "1e-5", "--eps-error", "0"], "eps_error"),
    (["calibrate", "--target-epsilon", "-1", "--delta", "1e-5", "--sampling-probability", "0.1", "--steps", "3"],
     "target_epsilon"),
    (["plot", "--sigma", "1", "-o", "x.png"], "--steps"),
    (["plot", "--sigma", "1", "--steps-grid", "1,x", "--delta", "1e-5", "-o", "x.png"], "--steps-grid"),
    (["plot", "--sigma", "1", "--steps-grid", "1,10", "-o", "x.png"], "--delta"),
    ([], "command"),
    (["frobnicate"], "frobnicate"),
])
def test_cli_bad_input_one_line(capsys, argv, needle):
    assert main(argv) == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fastpld: error: ") and needle in lines[0], cap.err
    assert cap.out == ""


def test_cli_calibrate_json(capsys):
    # find_noise_multiplier at the default accuracy; the CLI re-certifies the epsilon it reports
    out = _json(capsys, ["calibrate", "--target-epsilon", "2", "--delta", "1e-5", "--sampling-probability",
                         "0.05", "--steps", "100"])
    sigma = out["sigma"]
    assert isinstance(sigma, float) and 0.5 < sigma < 5
    assert out["epsilon"]["upper"] <= 2.0
    assert out["parameters"]["steps"] == 100
    # a 10% smaller sigma must miss the target: the answer is close to the smallest one
    import fastpld

    b = fastpld.compose(fastpld.PoissonSubsampledGaussian(0.9 * sigma, 0.05), 100).epsilon(1e-5)
    assert b.upper > 2.0
    assert sigma == fastpld.find_noise_multiplier(2.0, 1e-5, 0.05, 100)
    # an accuracy asked on the command line reaches the calibration and the re-certification
    out = _json(capsys, ["calibrate", "--target-epsilon", "2", "--delta", "1e-5", "--sampling-probability",
                         "0.05", "--steps", "100", "--eps-error", "0.05"])
    assert out["sigma"] == fastpld.find_noise_multiplier(2.0, 1e-5, 0.05, 100, eps_error=0.05)
    assert out["parameters"]["eps_error"] == 0.05
    assert out["epsilon"]["upper"] <= 2.0


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed")
def test_cli_plot_writes_png(tmp_path, capsys):
    out = tmp_path / "curve.png"
    assert main(["plot", "--sigma", "1.0", "--sampling-probability", "0.05", "--steps", "50",
                 "--steps-grid", "1,10,50", "--delta", "1e-5", "-o", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["plot"]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert info["steps_grid"] == [1, 10, 50] and len(info["epsilon"]["upper"]) == 3
    assert main(["plot", "--sigma", "1.0", "--steps", "5", "-o", str(tmp_path / "no_such_dir" / "x.png")]) == 2
    assert "--output" in capsys.readouterr().err


# --- issue 20: version, counts in float notation, --max-buckets, plain numbers in errors ---------------------
def test_cli_version(capsys):
    import fastpld

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"fastpld {fastpld.__version__}"


def test_cli_steps_in_float_notation(capsys):
    a = _json(capsys, ["epsilon", "--laplace-scale", "10", "--steps", "1e3", "--delta", "1e-6"])
    b = _json(capsys, ["epsilon", "--laplace-scale", "10", "--steps", "1000", "--delta", "1e-6"])
    assert a == b and a["parameters"]["steps"] == 1000
    assert _json(capsys, ["delta", "--laplace-scale", "10", "--steps", "2.5e1", "--epsilon", "1"])["parameters"][
        "steps"] == 25


@pytest.mark.parametrize("text", ["1.5e0", "1.5", "1e-3", "inf", "nan", "ten"])
def test_cli_steps_not_an_integer(capsys, text):
    assert main(["epsilon", "--sigma", "1", "--steps", text, "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastpld: error: argument --steps:") and repr(text) in err


def test_cli_count_is_exact_for_huge_float_notation():
    from fastpld.cli import _count

    assert _count("1e23") == 10 ** 23 and _count("1E12") == 10 ** 12 and _count("1_000") == 1000


def test_cli_max_buckets_flag_and_hint(capsys):
    argv = ["epsilon", "--sigma", "1", "--sampling-probability", "0.01", "--steps", "1000", "--delta", "1e-5"]
    assert main(argv + ["--max-buckets", "100"]) == 2
    err = capsys.readouterr().err
    assert "max_buckets=100" in err and "--max-buckets" in err and len(err.strip().splitlines()) == 1
    assert main(argv + ["--max-buckets", "1e7"]) == 0
    assert main(argv + ["--max-buckets", "0"]) == 2
    assert "max_buckets" in capsys.readouterr().err


def test_errors_print_numbers_plainly():
    import numpy as np

    import fastpld

    pld = fastpld.compose(fastpld.Gaussian(1.0), 2)
    calls = [lambda: pld.epsilon(np.float64(0.0)), lambda: pld.epsilon(np.array([0.5, 0.0])),
             lambda: pld.delta(np.float32(-1.0)), lambda: fastpld.Gaussian(np.float64(0.0)),
             lambda: fastpld.Laplace(np.array(-2.0)), lambda: fastpld.compose(fastpld.Gaussian(1.0), np.int64(0)),
             lambda: fastpld.compose(fastpld.Gaussian(1.0), 3, eps_error=np.float64(0.0))]
    for call in calls:
        with pytest.raises(ValueError) as exc:
            call()
        assert "np." not in str(exc.value) and "float64" not in str(exc.value), str(exc.value)
