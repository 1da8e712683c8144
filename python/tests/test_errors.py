"""Bad input raises wgml.Error subclasses carrying the library's message; nothing aborts."""
import os
import subprocess
import sys

import numpy as np
import pytest

import wgml
from wgml._ffi import lib


def test_every_status_has_a_class():
    classes = {}
    for name in dir(lib):
        if name.startswith("WGML_ERROR_"):
            status = getattr(lib, name)
            e = wgml._errors.error_for(status, "m")
            assert type(e) is not wgml.Error, name
            assert isinstance(e, wgml.Error) and e.status == status and str(e) == "m"
            classes[status] = type(e)
    assert len(set(classes.values())) == len(classes) == lib.WGML_STATUS_COUNT - 1
    assert wgml.ShapeError.status == lib.WGML_ERROR_SHAPE
    assert issubclass(wgml.ShapeError, ValueError)
    assert issubclass(wgml.DTypeError, wgml.InvalidArgumentError) and issubclass(wgml.DTypeError, TypeError)
    assert issubclass(wgml.FileError, OSError) and issubclass(wgml.OutOfMemoryError, MemoryError)


def test_shape_errors():
    a, b = wgml.tensor(np.ones((2, 3))), wgml.tensor(np.ones((4, 5)))
    with pytest.raises(wgml.ShapeError, match=r"\[2, 3\].*\[4, 5\]") as e:
        a + b
    assert e.value.status == lib.WGML_ERROR_SHAPE and e.value.status_name
    with pytest.raises(wgml.ShapeError):
        a @ b
    with pytest.raises(wgml.ShapeError):
        a.reshape(4, 2)
    with pytest.raises(wgml.ShapeError):
        wgml.concat([a, b], 0)
    with pytest.raises(wgml.ShapeError):
        wgml.chunk(a, 2, axis=1)
    with pytest.raises(wgml.ShapeError):
        wgml.layernorm(a, np.ones(4))
    with pytest.raises(wgml.ShapeError):
        wgml.cross_entropy(a, np.array([0, 1, 2], dtype=np.int32))


def test_dtype_errors():
    i = wgml.tensor(np.arange(6, dtype=np.int32))
    assert i.dtype == np.int32
    with pytest.raises(wgml.DTypeError, match="i32") as e:
        wgml.exp(i)
    assert isinstance(e.value, wgml.InvalidArgumentError) and e.value.status == lib.WGML_ERROR_INVALID_ARGUMENT
    with pytest.raises(wgml.DTypeError):
        wgml.tensor(np.ones(6)) + i
    with pytest.raises(wgml.DTypeError):
        wgml.embedding(wgml.tensor(np.ones((3, 2))), wgml.tensor(np.ones(2)))  # float ids
    with pytest.raises(wgml.DTypeError):
        wgml.tensor(np.array(["a", "b"]))
    with pytest.raises(wgml.DTypeError):
        wgml.tensor(np.ones(3), dtype=np.float64)
    with pytest.raises(wgml.DTypeError):
        wgml.tensor(np.ones(3, dtype=np.complex64))
    with pytest.raises(OverflowError):
        wgml.tensor(np.array([2 ** 40]))


def test_invalid_arguments():
    t = wgml.tensor(np.ones((2, 3)))
    with pytest.raises(wgml.InvalidArgumentError, match="axis"):
        wgml.sum(t, axis=5)
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.slice(t, 1, 2, 1)  # start >= stop
    with pytest.raises(wgml.InvalidArgumentError):
        t[:, 2:1]
    with pytest.raises(IndexError):
        t[::-1]
    with pytest.raises(IndexError):
        t[5]
    with pytest.raises(IndexError):
        t[0, 0, 0]
    with pytest.raises(IndexError):
        t["a"]
    with pytest.raises(wgml.InvalidArgumentError, match="dimensions"):
        wgml.tensor(np.ones((1, 1, 1, 1, 2)))
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.tensor(np.ones((0, 3)))
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.clamp(t, 1.0, -1.0)
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.dropout(t, 1.5)
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.layernorm(t, eps=-1.0)
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.rand((3,), 1.0, 0.0)
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.permute(t, (0, 0))
    with pytest.raises(wgml.InvalidArgumentError, match="out of range|index"):
        wgml.embedding(wgml.tensor(np.ones((3, 2))), np.array([0, 3], dtype=np.int32))
    with pytest.raises(wgml.InvalidArgumentError):
        wgml.cross_entropy(wgml.tensor(np.ones((2, 3))), np.array([0, 3], dtype=np.int32))
    with pytest.raises(ValueError):
        wgml.matmul(t, t.T, activation="tanh")
    with pytest.raises(wgml.InvalidArgumentError):
        t.write(np.ones(5))


def test_gpu_checked_labels_fail_at_read():
    logits = wgml.tensor(np.ones((2, 3)))
    labels = wgml.tensor(np.array([1.0, 7.0]))  # f32 labels are checked on the GPU
    loss = wgml.cross_entropy(logits, labels)
    with pytest.raises(wgml.InvalidArgumentError):
        loss.numpy()
    np.testing.assert_array_equal(wgml.tensor([1.0]).numpy(), [1.0])  # the context carries on


def test_none_and_wrong_types():
    t = wgml.tensor(np.ones(3))
    with pytest.raises(TypeError):
        wgml.exp(None)
    with pytest.raises(TypeError):
        t + None
    with pytest.raises(TypeError):
        wgml.matmul(None, t)
    with pytest.raises(TypeError):
        wgml.attention(t, None, t)
    with pytest.raises(TypeError):
        wgml.tensor(np.ones(3), ctx="gpu")
    with pytest.raises(TypeError):
        wgml.optim.SGD([np.ones(3)])
    with pytest.raises(TypeError):
        wgml.save("/tmp/x.safetensors", [t])
    with pytest.raises(TypeError):
        wgml.eval(t, 3)


def test_contexts():
    with wgml.Context() as ctx:
        a = wgml.tensor(np.ones(3), ctx=ctx)
        assert a.context is ctx and wgml.default_context() is ctx  # `with` makes it current
        b = wgml.tensor(np.ones(3), ctx=wgml.Context())
        with pytest.raises(wgml.ContextError, match="context"):
            a + b
        c = wgml.zeros(3)
        assert c.context is ctx
    assert ctx.closed and wgml.default_context() is not ctx
    with pytest.raises(wgml.ContextError):
        a.numpy()
    with pytest.raises(wgml.ContextError):
        a + 1
    with pytest.raises(wgml.ContextError):
        ctx.info()
    assert "freed" in repr(a) and "closed" in repr(ctx)
    del a, c  # their context freed them already: nothing to do, no crash
    with pytest.raises(ValueError):
        wgml.Context(backend="cuda")


def test_no_adapter_error():
    with pytest.raises(wgml.NoAdapterError, match="no-such-adapter"):
        wgml.Context(adapter="no-such-adapter")


def test_adapter_index():
    # every index wraps onto the adapters of the chosen kind: here the same one; negative refused
    first, seventh = wgml.Context(), wgml.Context(adapter_index=7)
    assert first.info()["name"] == seventh.info()["name"]
    first.close(), seventh.close()
    with pytest.raises(wgml.InvalidArgumentError, match="adapter_index"):
        wgml.Context(adapter_index=-1)


def test_context_settings(tmp_path, monkeypatch):
    # a desc field wins over its variable, read once when the context is made
    monkeypatch.setenv("WGML_DUMP_WGSL", str(tmp_path / "by_env"))
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((9, 13)), rng.standard_normal((13, 7))
    with wgml.Context(dump_wgsl=str(tmp_path / "by_desc"), kernel_choices={"gemv_cols": "32"}) as ctx:
        got = (wgml.tensor(a, ctx=ctx) @ wgml.tensor(b, ctx=ctx)).numpy()
        np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-5)
    assert len(os.listdir(tmp_path / "by_desc")) >= 1 and not (tmp_path / "by_env").exists()
    with pytest.raises(wgml.InvalidArgumentError, match="binding_limit"):
        wgml.Context(binding_limit=100)
    with pytest.raises(ValueError, match="gemm_tiles"):
        wgml.Context(kernel_choices={"gemm_tiles": "8,8,16,1"})


def test_device_lost():
    ctx = wgml.Context()
    t = wgml.tensor(np.ones(3), ctx=ctx)
    lib.wgml_debug_destroy_device(ctx._ptr)
    with pytest.raises(wgml.DeviceLostError):
        (t * 2).numpy()
    ctx.close()


def test_error_state_is_cleared_and_reported():
    ctx = wgml.default_context()
    try:
        wgml.tensor(np.ones(2)) + wgml.tensor(np.ones(3))
    except wgml.ShapeError as e:
        assert ctx.last_error == str(e)
    ctx.clear_error()
    assert ctx.last_error == ""


def test_interpreter_exit_with_live_objects(tmp_path):
    """Tensors, views, an optimiser and pending graphs alive at exit: a clean exit."""
    script = tmp_path / "exit.py"
    script.write_text(
        "import numpy as np, wgml\n"
        "w = wgml.tensor(np.ones((3, 2)), requires_grad=True)\n"
        "opt = wgml.optim.AdamW([w], lr=0.1)\n"
        "loss = (wgml.tensor(np.ones((4, 3))) @ w).sum()\n"
        "loss.backward()\n"
        "pending = wgml.exp(w.T)[1:]\n"
        "other = wgml.Context(); x = wgml.tensor([1.0], ctx=other)\n"
        "cycle = [x]; cycle.append(cycle)\n"
        "print('ok')\n")
    env = dict(os.environ)
    # the package as this test imported it (installed, or the source tree on sys.path)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(wgml.__file__)), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok" and "Traceback" not in r.stderr and "Exception ignored" not in r.stderr
