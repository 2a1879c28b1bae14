"""Models by name: `phaseinterp.models()` lists every shipped model from `catalog.json` (checked
against the cards in `assets/`), `phaseinterp.load(NAME)` and the verbs accept the names, and the
assets folders (`PHASEINTERP_HOME`, the checkout, the wheel's package data) say where a model is or
where to get it."""

import json
import shutil
from pathlib import Path

import pytest

import phaseinterp
from phaseinterp import assets, catalog
from phaseinterp.cli import main
from phaseinterp.sources import is_name, resolve_source

ROOT = Path(__file__).resolve().parents[1]


def test_catalog_json_is_written_from_the_shipped_cards():
    stored = json.loads(catalog.MANIFEST.read_text())
    assert stored == catalog.build(ROOT / "assets"), "stale: run `python -m phaseinterp.catalog`"
    studies = json.loads((ROOT / "assets" / catalog.LISTING).read_text())
    assert studies == catalog.listing(ROOT / "assets"), "stale: run `python -m experiments.catalog`"
    assert all(m["core"] for m in stored["models"]) and not any(m["core"] for m in studies["models"])
    cards = sorted(p.with_suffix(".safetensors").relative_to(ROOT / "assets").as_posix()
                   for p in (ROOT / "assets" / "checkpoints").rglob("*.json")
                   if p.with_suffix(".safetensors").is_file())
    assert sorted(m.path for m in catalog.models()) == cards and len(cards) >= 40


def test_models_describe_config_what_it_learned_and_its_task():
    infos = {m.name: m for m in phaseinterp.models()}
    core = sorted(n for n, m in infos.items() if m.core)
    assert core == ["deepseek-kernel", "full", "hf-deepseek-v4", "w4s4", "w4s4-seed1", "w4s4-uniform", "w8s4", "w8s8"]
    w4s4 = infos["w4s4"]
    assert w4s4.config == "2 layers (W4/S4 scalar gate x2), d_model 64, 4 heads / 1 KV head, 144,848 parameters"
    assert w4s4.learned.startswith("record lookup mod 8: mean 50.3%, worst 0.4%") and "residues >= 80%: 1, 2, 5, 6" in w4s4.learned
    assert w4s4.task == {"vocab_size": 256, "n_records": 10, "n_demos": 6, "seq_len": 64, "protocol": "prefix"}
    assert infos["full"].config.startswith("2 layers (full x2)")
    assert infos["hf-deepseek-v4"].config.startswith("HF DeepseekV4ForCausalLM, 2 layers")
    assert infos["nsa-w8s8-k2-s0"].config.startswith("NSA, 2 layers (compress block 8 / stride 8, 2 selected blocks")
    assert infos["zoo-csa-s0"].config.startswith("2 layers (W8/S4 vector gate deepseek-csa x2)")
    assert all(m.installed for m in infos.values())  # a checkout holds every shipped model
    assert "[installed]" in str(w4s4)


def test_load_by_name_matches_load_by_path():
    import torch

    by_name, by_path = phaseinterp.load("w4s4"), phaseinterp.load(ROOT / "assets/checkpoints/w4s4.safetensors")
    tokens = torch.randint(0, 256, (1, 16))
    assert torch.equal(by_name(tokens), by_path(tokens))
    loaded = resolve_source("zoo-w8s8-s0")  # not core: from the checkout's assets/
    assert loaded.path == ROOT / "assets/checkpoints/zoo/zoo-w8s8-s0.safetensors"
    assert loaded.card["name"] == "zoo-w8s8-s0" and loaded.eval_task["n_records"] == 10


def test_unknown_name_suggests_the_nearest_and_says_where_the_list_is():
    with pytest.raises(ValueError, match=r"model name 'w4s5' is unknown \(did you mean w4s4") as err:
        phaseinterp.load("w4s5")
    # the nearest names only: the other hundred are `phaseinterp models --all`, not a wall of text here
    assert "zoo-w8s8-s0" not in str(err.value) and "deepseek-kernel" not in str(err.value)
    assert f"one of the {len(catalog.models())} shipped model names" in str(err.value)
    assert "phaseinterp models --all" in str(err.value) and "phaseinterp.models()" in str(err.value)
    with pytest.raises(FileNotFoundError, match="no checkpoint at 'missing.safetensors'.*shipped model name"):
        phaseinterp.load("missing.safetensors")  # a path, not a name


def test_names_and_paths():
    assert is_name("w4s4") and is_name("zoo-w8s8-s0")
    assert not is_name("w4s4.safetensors") and not is_name("runs/w4s4") and not is_name("./w4s4") and not is_name("")


def test_a_folder_of_that_name_wins_over_the_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w4s4").mkdir()
    with pytest.raises(ValueError, match="model folder 'w4s4' is invalid"):
        phaseinterp.load("w4s4")


@pytest.fixture
def only_home(tmp_path, monkeypatch):
    """No checkout and no package data: PHASEINTERP_HOME holds w4s4 alone (as a user's partial copy)."""
    home = tmp_path / "home"
    (home / "checkpoints").mkdir(parents=True)
    for suffix in (".safetensors", ".json"):
        shutil.copy(ROOT / "assets/checkpoints" / f"w4s4{suffix}", home / "checkpoints")
    monkeypatch.setattr(assets, "CHECKOUT", tmp_path / "no-checkout")
    monkeypatch.setattr(assets, "PACKAGED", tmp_path / "no-package-data")
    monkeypatch.setenv(assets.HOME_ENV, str(home))
    return home


def test_phaseinterp_home_is_searched_and_a_known_model_not_installed_says_where_to_get_it(only_home):
    assert assets.roots() == [only_home.resolve()]
    assert resolve_source("w4s4").path == only_home.resolve() / "checkpoints/w4s4.safetensors"
    installed = {m.name for m in phaseinterp.models() if m.installed}
    assert installed == {"w4s4"}
    # without the studies' listing only the core set is known (a wheel): the error says where the rest is listed
    assert {m.name for m in phaseinterp.models()} == {m["name"] for m in json.loads(catalog.MANIFEST.read_text())["models"]}
    with pytest.raises(ValueError, match=r"model name 'zoo-w8s8-s0' is unknown.*the studies' models .* are listed "
                                         r"where an assets folder holds their catalog.json.*PHASEINTERP_HOME="):
        phaseinterp.load("zoo-w8s8-s0")
    shutil.copy(ROOT / "assets" / catalog.LISTING, only_home)  # the listing, without the studies' weights
    with pytest.raises(FileNotFoundError, match=r"model 'zoo-w8s8-s0' is known but not installed here.*"
                                                r"PHASEINTERP_HOME=/path/to/phaseinterp/assets.*Installed: w4s4$"):
        phaseinterp.load("zoo-w8s8-s0")
    with pytest.raises(FileNotFoundError, match=r"asset 'results/zoo.json' is not installed \(searched: .*home\)"):
        assets.asset("results/zoo.json")
    with pytest.raises(ValueError, match="asset path '../x' is invalid"):
        assets.asset("../x")


def test_phaseinterp_home_that_is_not_a_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(assets.HOME_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="PHASEINTERP_HOME=.*nowhere' is not a folder"):
        phaseinterp.load("w4s4")


def test_the_verbs_take_names(tmp_path, capsys):
    small = ["--n-per-residue", "2", "--n-boot", "20"]
    assert main(["sweep", "w4s4", "--out", str(tmp_path / "s"), "--n-perm", "20", "--no-progress", *small]) == 0
    curve = json.loads((tmp_path / "s" / "curve.json").read_text())
    assert curve["label"] == "w4s4"
    assert main(["knockout", "w4s4", "--out", str(tmp_path / "k"), "--self-calibration", *small]) == 0
    assert json.loads((tmp_path / "k" / "knockout_map.json").read_text())["meta"]["label"] == "w4s4"
    assert main(["gates", "w4s4", "--out", str(tmp_path / "g"), "--no-cycling", "--no-attribution", *small]) == 0
    capsys.readouterr()
    assert main(["sweep", "w4s5", "--out", str(tmp_path / "x")]) == 2
    assert "model name 'w4s5' is unknown (did you mean w4s4?)" in capsys.readouterr().err


def test_reproduce_reads_the_assets_folders():
    from phaseinterp.commands.reproduce import ASSETS
    from experiments.zoo import section as zoo

    assert ASSETS == ROOT / "assets" / "checkpoints"  # from a checkout
    assert zoo.RESULTS == ROOT / "assets" / "results" / "zoo.json"
    assert all(catalog.packaged(m.path) == m.core for m in catalog.models())


def test_a_user_s_own_assets_folder_lists_its_models(tmp_path, monkeypatch):
    home = tmp_path / "mine"
    (home / "checkpoints" / "mine").mkdir(parents=True)
    for suffix in (".safetensors", ".json"):  # a user's carded checkpoint, under a name of its own
        shutil.copy(ROOT / "assets/checkpoints" / f"w8s8{suffix}", home / "checkpoints" / "mine" / f"my-w8s8{suffix}")
    monkeypatch.setattr(assets, "CHECKOUT", tmp_path / "no-checkout")
    monkeypatch.setenv(assets.HOME_ENV, str(home))
    assert "my-w8s8" not in catalog.names()
    catalog.write_listing(home)
    info = catalog.model_info("my-w8s8")
    assert info.installed and info.group == "mine" and not info.core
    assert resolve_source("my-w8s8").path == home.resolve() / "checkpoints/mine/my-w8s8.safetensors"


def test_models_verb_lists_the_names(only_home, capsys):
    shutil.copy(ROOT / "assets" / catalog.LISTING, only_home)
    n = len(catalog.models())
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (f"{n} shipped models, 1 installed here; the other {n - 1} from {assets.SOURCE} "
                         "(`phaseinterp models --all` describes each)")
    assert lines[:3] == ["installed (1):", "  core:", f"    {catalog.model_info('w4s4')}"]
    assert [line for line in lines if line.endswith("[installed]")] == [f"    {catalog.model_info('w4s4')}"]
    assert main(["models", "--installed", "--json"]) == 0
    (w4s4,) = json.loads(capsys.readouterr().out)
    assert w4s4["name"] == "w4s4" and w4s4["installed"] and w4s4["task"]["n_records"] == 10
