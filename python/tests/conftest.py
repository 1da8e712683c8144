"""Shared helpers. The tests run against whichever libwgml the package finds (CTest's
test_python sets WGML_LIBRARY to the build's); every reference is NumPy in float64."""
import os
import zlib

import numpy as np
import pytest

import wgml

# one size per kind of awkwardness: a single element, a prime, one under a power of two, and
# one past 2^16 (several workgroups, a ragged tail)
SIZES = [1, 7, 1023, 65537]


def pytest_report_header(config):
    return "wgml %s from %s (library %s, header %s)" % (wgml.__version__, os.path.dirname(wgml.__file__),
                                                          wgml.library_path, wgml.header_path)


@pytest.fixture
def rng(request):
    # a seed per test, stable across runs, so a failure reproduces
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def nonzero(rng, shape, lo=0.1, hi=2.0, positive=False):
    """Random values of magnitude in [lo, hi), random signs unless positive, rounded to f32
    (what the device sees) and returned as float64 for the reference."""
    x = rng.uniform(lo, hi, size=shape)
    if not positive:
        x *= rng.choice([-1.0, 1.0], size=shape)
    return x.astype(np.float32).astype(np.float64)


def close(got, want, rtol=1e-5, atol=1e-6):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, "shape %s, want %s" % (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
