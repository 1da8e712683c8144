"""wgml.save / wgml.load through the library's safetensors reader and writer."""
import numpy as np
import pytest

import wgml


def test_round_trip(tmp_path, rng):
    path = tmp_path / "t.safetensors"
    a = rng.standard_normal((3, 1023)).astype(np.float32)
    ids = rng.integers(-100, 100, size=(7,)).astype(np.int32)
    big = rng.standard_normal(65537).astype(np.float32)
    tensors = {"a": wgml.tensor(a), "a.T": wgml.tensor(a).T[::2],  # a view, saved in its logical order
               "ids": wgml.tensor(ids), "lazy": wgml.exp(wgml.tensor(big)), "host": big[:5]}
    wgml.save(tensors, path, metadata={"step": 42, "note": "héllo"})
    got, meta = wgml.load(path)
    assert set(got) == set(tensors)
    assert meta == {"step": "42", "note": "héllo"}
    np.testing.assert_array_equal(got["a"].numpy(), a)
    np.testing.assert_array_equal(got["a.T"].numpy(), a.T[::2])
    assert got["ids"].dtype == np.int32
    np.testing.assert_array_equal(got["ids"].numpy(), ids)
    np.testing.assert_allclose(got["lazy"].numpy(), np.exp(big), rtol=1e-5)
    arrays, meta2 = wgml.load(str(path), numpy=True)
    assert isinstance(arrays["host"], np.ndarray) and meta2 == meta
    np.testing.assert_array_equal(arrays["host"], big[:5])
    # loaded tensors are ordinary: ops and gradients work on them
    w = got["a"]
    w.requires_grad = True
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * a, rtol=1e-6)


def test_no_metadata(tmp_path):
    path = str(tmp_path / "m.safetensors")
    wgml.save({"x": np.ones(3)}, path)
    got, meta = wgml.load(path)
    assert meta == {} and got["x"].tolist() == [1, 1, 1]


def test_bad_files(tmp_path):
    with pytest.raises(wgml.FileError):
        wgml.load(tmp_path / "missing.safetensors")
    with pytest.raises(OSError):  # FileError is an OSError
        wgml.load(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(wgml.FormatError):
        wgml.load(junk)
    good = tmp_path / "good.safetensors"
    wgml.save({"x": np.arange(100.0)}, good)
    data = good.read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:-10])
    with pytest.raises(wgml.FormatError):
        wgml.load(tmp_path / "cut.safetensors")
    with pytest.raises(wgml.FileError):
        wgml.save({"x": np.ones(2)}, tmp_path / "no" / "such" / "dir.safetensors")
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.save({"": np.ones(2)}, tmp_path / "bad.safetensors")
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.save({"x": np.ones(2)}, tmp_path / "bad.safetensors", metadata={"k" * 100: "v"})
