"""NumPy round trips: non-contiguous arrays arrive in their logical order, dtypes map to
float32 / int32, and tensors convert back through numpy(), np.asarray and item()."""
import numpy as np
import pytest

import wgml
from conftest import SIZES, nonzero


def arrays(rng):
    base = rng.standard_normal((6, 10, 4))
    yield "transposed", base.transpose(2, 0, 1)
    yield "strided", base[::2, 1::3, ::-1]
    yield "reversed", base[::-1]
    yield "fortran", np.asfortranarray(base)
    yield "broadcast", np.broadcast_to(base[:1, :1], (6, 10, 4))
    yield "column", base[:, 3, 1]
    yield "float32 strided", base.astype(np.float32)[1:, ::3].T
    yield "int64 transposed", rng.integers(-5, 5, size=(3, 7)).T
    yield "int32 strided", rng.integers(-2 ** 31, 2 ** 31 - 1, size=(9, 9), dtype=np.int64).astype(np.int32)[::4, 1::2]
    yield "uint8", rng.integers(0, 255, size=(5,), dtype=np.uint8)


def test_non_contiguous_round_trips(rng):
    for what, a in arrays(rng):
        t = wgml.tensor(a)
        want_dtype = np.int32 if a.dtype.kind in "iu" else np.float32
        assert t.dtype == want_dtype, what
        assert t.shape == a.shape and t.ndim == a.ndim and t.size == a.size, what
        got = t.numpy()
        assert got.flags.c_contiguous and got.dtype == want_dtype, what
        np.testing.assert_array_equal(got, a.astype(want_dtype), err_msg=what)
        np.testing.assert_array_equal(np.asarray(t), a.astype(want_dtype), err_msg=what)


@pytest.mark.parametrize("n", SIZES)
def test_sizes_round_trip(n, rng):
    x = nonzero(rng, (n,)).astype(np.float32)
    np.testing.assert_array_equal(wgml.tensor(x).numpy(), x)
    i = rng.integers(-2 ** 31, 2 ** 31 - 1, size=n, dtype=np.int64).astype(np.int32)
    np.testing.assert_array_equal(wgml.tensor(i).numpy(), i)


def test_views_read_back(rng):
    a = rng.standard_normal((4, 6, 8)).astype(np.float32)
    t = wgml.tensor(a)
    np.testing.assert_array_equal(t.permute(2, 0, 1)[::3, 1:, ::2].numpy(), a.transpose(2, 0, 1)[::3, 1:, ::2])
    np.testing.assert_array_equal(np.asarray(t.T), a.T)


def test_conversions():
    assert wgml.tensor(3.5).shape == ()  # a scalar is 0-d, as in NumPy and PyTorch
    assert wgml.tensor(3.5).item() == 3.5
    assert wgml.tensor(7).dtype == np.int32 and wgml.tensor(7).item() == 7
    assert wgml.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert wgml.tensor([True, False]).dtype == np.float32  # masks are float32 in wgml
    assert wgml.tensor(np.ones(3), dtype="i32").dtype == np.int32
    assert wgml.tensor([2.0, -3.0], dtype=np.int32).tolist() == [2, -3]  # integral floats convert exactly
    for bad in ([1.9, -1.9], [np.nan], [np.inf], [2.0 ** 31]):  # no silent truncation (issue 27)
        with pytest.raises((ValueError, OverflowError)):
            wgml.tensor(bad, dtype="i32")
    assert wgml.Tensor(np.ones((2, 2))).shape == (2, 2)
    t = wgml.tensor(np.arange(6.0).reshape(2, 3))
    assert float(t[1, 2]) == 5.0 and int(t[0, 1]) == 1 and bool(t[0, 1])
    with pytest.raises(ValueError):
        bool(t)
    with pytest.raises(ValueError):
        t.item()
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError):
        np.asarray(t, copy=False) if np.__version__ >= "2" else t.__array__(copy=False)
    assert repr(t) == "wgml.tensor([[0., 1., 2.],\n             [3., 4., 5.]], shape=(2, 3), dtype=float32)"
    assert wgml.tensor(t).tolist() == t.tolist()  # a copy of a tensor
    t2 = wgml.tensor(np.zeros(3))
    t2.write([1, 2, 3])
    assert t2.tolist() == [1, 2, 3]
    assert hash(t) != hash(t2) and {t: 1}[t] == 1


@pytest.mark.parametrize("n", SIZES)
def test_float16_rounds_as_numpy(n, rng):
    """f16 tensors: made from floats by rounding to nearest even (numpy's float16 conversion,
    overflow to inf included), read back as float16, widened exactly by a cast to f32."""
    x = (nonzero(rng, (n,)) * 2.0 ** rng.integers(-26, 18, size=n)).astype(np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    t = wgml.tensor(x, dtype="f16")
    assert t.dtype == np.float16
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(wgml.cast(t, "f32").numpy(), want.astype(np.float32))
