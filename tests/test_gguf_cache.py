"""The converted-GGUF cache: where it lives, how it is keyed, that it is written atomically and never fatal,
and (on SmolLM2's real file) that a cached load is the GGUF load, bit for bit."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

import pytest
import torch

from phaseinterp.backends import gguf


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path / "c"))
    assert gguf.cache_root() == tmp_path / "c"
    for off in ("off", "OFF", "0", ""):
        monkeypatch.setenv(gguf.CACHE_ENV, off)
        assert gguf.cache_root() is None
        assert gguf.cache_dir(Path(__file__)) is None
    monkeypatch.delenv(gguf.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf.cache_root() == tmp_path / "xdg" / "phaseinterp"


def test_a_rewritten_file_gets_a_new_cache_entry(monkeypatch, tmp_path):
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path / "c"))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"1234")
    first = gguf.cache_dir(f)
    assert first.parent == tmp_path / "c" / "gguf" and first.name.startswith("m-")
    assert gguf.cache_dir(f) == first
    os.utime(f, ns=(1, 1))
    assert gguf.cache_dir(f) != first


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)).eval()


def test_a_saved_model_reloads_identically_and_only_a_finished_folder_counts(tmp_path):
    from transformers import AutoModelForCausalLM

    model, folder = tiny_llama(), tmp_path / "entry"
    assert not gguf._complete(folder, "model")
    gguf._save(folder, "model", functools.partial(gguf._write_model, model))
    assert gguf._complete(folder, "model") and not gguf._complete(folder, "tokenizer")
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]  # the temporary folder is gone
    again = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    ids = torch.tensor([[1, 5, 7, 3]])
    assert torch.equal(model(ids).logits, again(ids).logits)
    (folder / "model.done").unlink()  # a folder without its marker (a killed writer) is not read
    assert not gguf._complete(folder, "model")


def test_only_entries_unused_for_stale_days_are_pruned(tmp_path):
    root, day = tmp_path / "gguf", 86400.0
    for name, age in (("old", 31), ("recent", 29), ("new", 40)):
        (root / name).mkdir(parents=True)
        (root / name / "model.done").write_text("complete\n")
        os.utime(root / name / "model.done", (1e9 - age * day, 1e9 - age * day))
    (root / "recent" / "tokenizer.done").write_text("complete\n")  # the newest marker counts
    os.utime(root / "recent" / "tokenizer.done", (1e9 - day, 1e9 - day))
    (root / ".killed.model.abcd").mkdir()  # a killed writer's folder, no marker
    os.utime(root / ".killed.model.abcd", (1e9 - 31 * day, 1e9 - 31 * day))
    gone = gguf.prune(root, keep=root / "new", now=1e9, stale_days=30)
    assert sorted(p.name for p in gone) == [".killed.model.abcd", "old"]
    assert sorted(p.name for p in root.iterdir()) == ["new", "recent"]
    assert gguf.prune(tmp_path / "absent", keep=root, now=1e9) == []


def test_a_cached_load_marks_its_entry_used_and_a_new_entry_prunes_stale_ones(monkeypatch, tmp_path):
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path / "c"))
    monkeypatch.setattr(gguf, "_quiet", contextlib.nullcontext)
    f = tmp_path / "m.gguf"
    f.write_bytes(b"1234")
    folder = gguf.cache_dir(f)
    write = lambda obj, where: (where / "obj.txt").write_text(obj)  # noqa: E731
    load = lambda where, gguf_file=None: "converted" if gguf_file else (Path(where) / "obj.txt").read_text()  # noqa: E731
    stale = folder.parent / "old-entry"
    stale.mkdir(parents=True)
    (stale / "model.done").write_text("complete\n")
    os.utime(stale / "model.done", (1.0, 1.0))
    with pytest.warns(UserWarning, match="removed 1 GGUF cache entry unused for 30 days: old-entry"):
        assert gguf._converted(f, "model", load, write) == "converted"
    assert not stale.exists() and gguf._complete(folder, "model")
    os.utime(folder / "model.done", (1.0, 1.0))
    assert gguf._converted(f, "model", load, write) == "converted"  # read back from the cache
    assert gguf._last_used(folder) > 1.0


def test_an_unwritable_cache_warns_instead_of_raising(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.warns(UserWarning, match="could not cache the converted GGUF model"):
        gguf._save(blocker / "entry", "model", functools.partial(gguf._write_model, tiny_llama()))
    assert blocker.read_text() == "not a folder"


def test_smollm2_from_the_cache_is_the_gguf_load(monkeypatch, tmp_path):
    from phaseinterp.backends.smollm2 import GGUF_FILE, smollm2_dir

    try:
        path = Path(smollm2_dir()) / GGUF_FILE
    except ImportError as err:
        pytest.skip(str(err))
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path))
    torch.set_num_threads(1)
    import gguf as reader_module

    made, readers = reader_module.GGUFReader, []
    counting = lambda *a, **k: readers.append(a) or made(*a, **k)  # noqa: E731
    monkeypatch.setattr(reader_module, "GGUFReader", counting)
    fresh, fresh_tok = gguf.load_gguf(path)  # converts and writes the cache
    assert len(readers) == 1  # one parse of the file's metadata serves the tokenizer, the config and the weights
    assert reader_module.GGUFReader is counting  # put back on the way out
    monkeypatch.setattr(reader_module, "GGUFReader", made)
    assert gguf._complete(gguf.cache_dir(path), "model") and gguf._complete(gguf.cache_dir(path), "tokenizer")
    cached, cached_tok = gguf.load_gguf_model(path), gguf.load_gguf_tokenizer(path)
    a, b = fresh.state_dict(), cached.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert cached.lm_head.weight.data_ptr() == cached.model.embed_tokens.weight.data_ptr()  # still tied
    text = "<|im_start|>user\nThe special magic number is 8735.<|im_end|>"
    assert fresh_tok(text).input_ids == cached_tok(text).input_ids
    assert fresh_tok.bos_token_id == cached_tok.bos_token_id and fresh_tok.eos_token_id == cached_tok.eos_token_id
    half = gguf.load_gguf_model(path, dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16
    assert torch.equal(half.model.embed_tokens.weight, fresh.model.embed_tokens.weight.to(torch.bfloat16))


def test_overlapping_loads_in_two_threads_leave_the_reader_as_it_was():
    """Thread B asks for the swap while thread A holds it and leaves after A: without the lock B would save
    A's reader as the original and put it back at its exit."""
    import threading
    import time

    import gguf as gguf_package

    original = gguf_package.GGUFReader
    b_inside, a_out = threading.Event(), threading.Event()
    seen = {}

    def a():
        with gguf.one_parse():
            seen["b entered while a held it"] = b_inside.wait(timeout=1.0)
        a_out.set()

    def b():
        with gguf.one_parse():
            b_inside.set()
            a_out.wait(timeout=5.0)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    threads[0].start()
    while gguf_package.GGUFReader is original:  # until A holds the swap
        time.sleep(0.001)
    threads[1].start()
    for t in threads:
        t.join()
    assert not seen["b entered while a held it"] and gguf_package.GGUFReader is original
