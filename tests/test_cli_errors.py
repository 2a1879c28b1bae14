"""One error boundary for the command line: bad paths, outputs and devices give one line on
stderr and exit status 2 before any work, never a traceback; `--debug` shows the traceback."""

import pytest

from phaseinterp.cli import main

VERBS_WITH_CHECKPOINTS = ["sweep", "knockout", "gates"]


@pytest.mark.parametrize("verb", VERBS_WITH_CHECKPOINTS)
def test_a_missing_checkpoint_is_one_line(verb, tmp_path, capsys):
    assert main([verb, str(tmp_path / "missing.safetensors"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"phaseinterp {verb}: error: ") and "missing.safetensors" in err
    assert "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["sweep", "--preset", "tiny-w4s4"], ["knockout", "--preset", "tiny-w4s4"], ["gates", "--preset", "tiny-w4s4"],
    ["train", "--preset", "w4s4", "--steps", "1"], ["theory"], ["flip", "--period", "4"],
])
def test_outputs_are_checked_before_the_work(argv, tmp_path, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert main([*argv, "--out", str(a_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--out '{a_file}' is an existing file: allowed a folder" in err and "\n" not in err
    assert main([*argv, "--out", str(a_file / "below")]) == 2  # a folder under a file cannot be created
    assert "cannot be written" in capsys.readouterr().err
    assert a_file.read_text() == "x"


def test_a_device_the_machine_lacks_is_named(tmp_path, capsys):
    assert main(["sweep", "--preset", "tiny-w4s4", "--device", "cuda:7", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--device 'cuda:7' is invalid: this machine has" in err and "Traceback" not in err
    assert main(["sweep", "--preset", "tiny-w4s4", "--device", "tpu9", "--out", str(tmp_path / "o")]) == 2
    assert "--device 'tpu9' is invalid" in capsys.readouterr().err


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        main(["sweep", str(tmp_path / "missing.safetensors"), "--out", str(tmp_path / "o"), "--debug"])
