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
