"""wgml.gpt: the C library's GPT from Python. A checkpoint of `wgml gpt train` (WGML_CLI) is
loaded and sampled against `wgml gpt sample`; the forward and the loss are checked against a
float64 NumPy GPT-2 of the same weights; training, saving and resuming from Python."""
import math
import os
import subprocess

import numpy as np
import pytest

import wgml
from wgml import _ffi
from wgml.gpt import GPT, GPTConfig

CLI = os.environ.get("WGML_CLI")
needs_cli = pytest.mark.skipif(not CLI, reason="WGML_CLI (the wgml command) not set")

TEXT = "".join("Line %d: the quick brown fox jumps over the lazy dog, %d times.\n" % (i, i * 7 % 13)
               for i in range(1, 61))


def numpy_logits(sd, cfg, ids):
    """GPT-2 (pre-norm layernorm blocks, exact GELU, tied head) in float64: logits [B, T, V]."""
    p = {k: v.astype(np.float64) for k, v in sd.items()}
    B, T = ids.shape
    C, H, eps = cfg.width, cfg.heads, cfg.norm_eps
    D = C // H

    def ln(x, g, b):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * g + b

    x = p["wte"][ids] + p["wpe"][:T]
    future = np.triu(np.ones((T, T), dtype=bool), 1)
    erf = np.vectorize(math.erf)
    for layer in range(cfg.layers):
        w = {k[len("h.%d." % layer):]: v for k, v in p.items() if k.startswith("h.%d." % layer)}
        qkv = ln(x, w["ln1.w"], w["ln1.b"]) @ w["attn.wqkv"] + w["attn.bqkv"]
        q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, H, D).transpose(0, 2, 1, 3) for i in range(3))
        s = np.where(future, -np.inf, q @ k.transpose(0, 1, 3, 2) / math.sqrt(D))
        s = np.exp(s - s.max(-1, keepdims=True))
        x = x + (s / s.sum(-1, keepdims=True) @ v).transpose(0, 2, 1, 3).reshape(B, T, C) @ w["attn.wo"] + w["attn.bo"]
        h = ln(x, w["ln2.w"], w["ln2.b"]) @ w["mlp.w1"] + w["mlp.b1"]
        x = x + (0.5 * h * (1 + erf(h / math.sqrt(2)))) @ w["mlp.w2"] + w["mlp.b2"]
    return ln(x, p["lnf.w"], p["lnf.b"]) @ p["wte"].T


def numpy_loss(logits, targets):
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, targets[..., None], -1).mean()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint of `wgml gpt train`: one layer, width 16, block 16, 40 steps."""
    if not CLI:
        pytest.skip("WGML_CLI (the wgml command) not set")
    d = tmp_path_factory.mktemp("gpt")
    (d / "text").mkdir()
    (d / "text" / "a").write_text(TEXT)
    subprocess.run([CLI, "gpt", "train", "--data", str(d / "text"), "--layers", "1", "--heads", "2", "--width", "16",
                    "--block", "16", "--batch", "4", "--steps", "40", "--lr", "0.01", "--warmup", "0",
                    "--eval-every", "0", "--out", str(d / "out")], check=True, capture_output=True, timeout=300)
    return str(d / "out" / "gpt.safetensors")


@pytest.fixture(scope="module")
def py_trained():
    """A model made and trained from Python (no command needed): weights far from their
    initial ones, so the logits are not all alike."""
    m = GPT.new(vocabulary=TEXT, block=12, layers=2, heads=2, width=16, seed=3)
    opt = m.optimizer(lr=1e-2)
    for step in range(25):
        m.train_step(opt, *m.batch(TEXT, 4, seed=step))
    return m


def test_every_gpt_function_is_declared_and_loaded():
    assert _ffi.gpt_header_path and os.path.dirname(_ffi.gpt_header_path) == os.path.dirname(wgml.header_path)
    with open(_ffi.gpt_header_path, encoding="utf-8") as f:
        names = _ffi.exported_names(f.read())
    assert "wgml_gpt_generate" in names and len(names) >= 20
    for name in names:
        assert callable(getattr(_ffi.lib, name)), name


@needs_cli
def test_load_a_checkpoint_of_the_command(trained):
    m = GPT.load(trained)
    c = m.config
    assert (c.arch, c.layers, c.heads, c.width, c.block, c.ffn, c.kv_heads) == ("gpt2", 1, 2, 16, 16, 64, 2)
    assert m.vocab == bytes(sorted(set(TEXT.encode()))) and c.vocab == len(m.vocab) == m.vocab_size
    assert m.step == 40
    assert m.decode(m.encode("Line 7: fox")) == "Line 7: fox"
    with pytest.raises(ValueError, match="not in the model's vocabulary"):
        m.encode("Line Z")


@needs_cli
def test_greedy_generation_is_the_commands(trained):
    # 30 tokens after a 4-token prompt go past the block of 16: the sliding cache too
    r = subprocess.run([CLI, "gpt", "sample", "--checkpoint", trained, "--prompt", "Line", "--tokens", "30",
                        "--temperature", "0"], check=True, capture_output=True, text=True, timeout=120)
    m = GPT.load(trained)
    got = m.generate("Line", max_new_tokens=30, temperature=0)
    assert len(got) == 30 and len(set(got)) > 3, got  # a text, not one byte repeated
    assert r.stdout == "Line" + got + "\n"
    ids = m.generate(m.encode("Line"), max_new_tokens=30, temperature=0)
    assert ids.dtype == np.int32 and m.decode(ids) == got
    assert m.generate(b"Line", max_new_tokens=30, temperature=0) == got.encode()
    # f16 weights reach the C sampler (the GPU's decode plan; a CPU adapter keeps the graph path)
    half = m.generate("Line", max_new_tokens=30, temperature=0, f16_weights=True)
    assert isinstance(half, str) and len(half) == 30


def test_batch_generation_is_each_prompts_own(trained):
    # prompts of different lengths and kinds, one past the block of 16, ten of them (the plan's 8
    # slots in two turns): greedy, each what generate gives it alone
    m = GPT.load(trained)
    prompts = ["Line", "fox", b"Line 7: the quick", m.encode("the"), "L"] * 2
    got = m.generate_batch(prompts, max_new_tokens=21, temperature=0)
    assert len(got) == len(prompts)
    for p, g in zip(prompts, got):
        want = m.generate(p, max_new_tokens=21, temperature=0)
        assert type(g) is type(want)
        assert (g == want).all() if isinstance(g, np.ndarray) else g == want
    # a seed draws the same again; refusals
    a = m.generate_batch(["fox", "the"], 15, temperature=1.0, seed=3)
    assert a == m.generate_batch(["fox", "the"], 15, temperature=1.0, seed=3)
    assert m.generate_batch([], 5) == [] and m.generate_batch(["fox"], 0) == [""]
    assert m.generate_batch((p for p in ["fox", "the"]), 5, temperature=0) == [m.generate(p, 5, temperature=0) for p in ["fox", "the"]]
    with pytest.raises(ValueError, match="prompt 1 has no tokens"):
        m.generate_batch(["fox", ""], 5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        m.generate_batch([], -5)
    with pytest.raises(ValueError, match="prompt 1"):
        m.generate_batch(["fox", [1, 10 ** 6]], 5)
    for one in ("fox", [1, 2, 3], np.array([1, 2, 3])):
        with pytest.raises(TypeError):
            m.generate_batch(one, 5)


@needs_cli
def test_seeded_sampling_is_the_commands(trained):
    r = subprocess.run([CLI, "gpt", "sample", "--checkpoint", trained, "--prompt", "fox", "--tokens", "25",
                        "--top-k", "5", "--temperature", "0.9", "--seed", "11"],
                       check=True, capture_output=True, text=True, timeout=120)
    m = GPT.load(trained)
    got = m.generate("fox", 25, temperature=0.9, top_k=5, seed=11)
    assert r.stdout == "fox" + got + "\n"
    assert m.generate("fox", 25, temperature=0.9, top_k=5, seed=12) != got


@needs_cli
def test_forward_and_loss_of_a_checkpoint_match_numpy(trained, rng):
    m = GPT.load(trained)
    ids = rng.integers(0, m.vocab_size, size=(3, 13))
    targets = rng.integers(0, m.vocab_size, size=(3, 13))
    want = numpy_logits(m.state_dict(), m.config, ids)
    np.testing.assert_allclose(m.logits(ids), want, rtol=1e-4, atol=1e-4)
    assert abs(m.eval_loss(ids, targets) - numpy_loss(want, targets)) < 1e-4


def test_forward_and_loss_match_numpy(py_trained, rng):
    m = py_trained
    ids = rng.integers(0, m.vocab_size, size=(2, 11))
    want = numpy_logits(m.state_dict(), m.config, ids)
    assert want.std() > 0.5  # trained: the logits differ
    got = m.logits(ids)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m.logits(ids[1]), got[1], rtol=1e-6, atol=1e-6)
    x = m.encode(TEXT[100:112])
    y = m.encode(TEXT[101:113])
    assert abs(m.eval_loss(x, y) - numpy_loss(numpy_logits(m.state_dict(), m.config, x[None]), y[None])) < 1e-4


def test_evaluate_is_the_mean_over_windows(py_trained):
    m = py_trained
    text = TEXT[:100]  # 99 predictions: 8 windows of 12 and one of 3
    ids = m.encode(text)
    per_token = []
    for s in range(0, 99, 12):
        e = min(s + 12, 99)
        lg = numpy_logits(m.state_dict(), m.config, ids[None, s:e])[0]
        lg = lg - lg.max(-1, keepdims=True)
        logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
        per_token.append(-logp[np.arange(e - s), ids[s + 1:e + 1]])
    per_token = np.concatenate(per_token)
    assert per_token.size == 99
    assert abs(m.evaluate(text, batch=3) - per_token.mean()) < 1e-4


def test_greedy_decoding_matches_the_full_forward(py_trained):
    # the KV-cache path against the argmax of the whole forward, token by token, within the block
    m = py_trained
    ids = list(m.encode("Line 4"))
    new = m.generate(np.array(ids), max_new_tokens=m.config.block - len(ids), temperature=0)
    compared = 0
    for tok in new:
        lg = m.logits(np.array(ids))[-1]
        top2 = np.sort(lg)[-2:]
        if top2[1] - top2[0] > 1e-3:  # not a near tie that rounding may decide
            assert tok == int(np.argmax(lg))
            compared += 1
        ids.append(int(tok))
    assert len(new) == 6 and compared >= 4


def test_on_token_sees_each_token_and_stops():
    m = GPT.new(vocabulary=TEXT, block=8, layers=1, heads=2, width=16, seed=1)
    seen = []
    out = m.generate("the", max_new_tokens=20, temperature=1.0, seed=4, on_token=lambda t: seen.append(t))
    assert m.encode(out).tolist() == seen and len(seen) == 20
    seen = []
    out = m.generate("the", max_new_tokens=20, temperature=1.0, seed=4,
                     on_token=lambda t: seen.append(t) or len(seen) == 5)
    assert len(seen) == 5 and m.encode(out).tolist() == seen

    def boom(t):
        raise KeyError("stop here")
    with pytest.raises(KeyError, match="stop here"):
        m.generate("the", 10, on_token=boom)
    assert m.generate("the", 0) == ""


def test_training_lowers_the_loss_and_the_step_reports_the_loss_before_it():
    m = GPT.new(vocabulary=TEXT, block=16, layers=1, heads=2, width=16, seed=7)
    assert m.step == 0 and m.config.ffn == 64 and m.num_parameters() == sum(a.size for a in m.state_dict().values())
    x, y = m.batch(TEXT, 4, seed=0)
    assert x.shape == y.shape == (4, 16) and (x[:, 1:] == y[:, :-1]).all()
    opt = m.optimizer(lr=1e-2, weight_decay=0.1, max_grad_norm=1.0)
    before = m.eval_loss(x, y)
    assert abs(before - math.log(m.vocab_size)) < 0.2  # near uniform at initialisation
    first = m.train_step(opt, x, y)
    assert abs(first - before) < 1e-5  # dropout 0: the step's loss is the evaluation's
    assert math.isfinite(opt.grad_norm) and opt.grad_norm > 0 and opt.steps == 1
    losses = [m.train_step(opt, x, y) for _ in range(15)]
    after = m.eval_loss(x, y)
    assert all(math.isfinite(v) for v in losses) and after < before - 0.5 and losses[-1] < losses[0]


def test_save_load_round_trip_and_resume(tmp_path):
    m = GPT.new(vocabulary=TEXT, block=8, layers=2, heads=2, width=16, dropout=0.0, seed=5)
    opt = m.optimizer(lr=5e-3, weight_decay=0.1)
    batches = [m.batch(TEXT, 3, seed=s) for s in range(6)]
    for x, y in batches[:3]:
        m.train_step(opt, x, y)
    path = tmp_path / "m.safetensors"
    m.save(path, optimizer=opt)
    back = GPT.load(path)
    assert back.config == m.config and back.vocab == m.vocab and back.step == 3
    a, b = m.state_dict(), back.state_dict()
    assert list(a) == list(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)  # bit for bit
    # the moments too: the same three further steps from the file as in memory
    opt2 = back.optimizer(lr=5e-3, weight_decay=0.1)
    back.load_optimizer(path, opt2)
    assert opt2.steps == 3
    for x, y in batches[3:]:
        assert m.train_step(opt, x, y) == back.train_step(opt2, x, y)
    a, b = m.state_dict(), back.state_dict()
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
    # a weights-only file holds no moments
    m.save(tmp_path / "w.safetensors")
    with pytest.raises(wgml.FormatError):
        back.load_optimizer(tmp_path / "w.safetensors", opt2)
    with pytest.raises(ValueError, match="another model"):
        back.save(tmp_path / "x.safetensors", optimizer=opt)


def _against_f32_then_resumed(tmp_path, precision, rel):
    """Three steps in f32 and in `precision` from the same weights, their losses within rel of
    each other; then the `precision` run saved with its optimizer, loaded, and two more steps
    of both alike. Returns the two runs' losses and the model."""
    runs = {}
    for p in ("f32", precision):
        m = GPT.new(vocabulary=TEXT, block=8, layers=1, heads=2, width=16, seed=5)
        opt = m.optimizer(lr=5e-3, precision=p)
        batches = [m.batch(TEXT, 3, seed=s) for s in range(5)]
        runs[p] = [m.train_step(opt, x, y) for x, y in batches[:3]]
    for a, b in zip(runs["f32"], runs[precision]):
        assert abs(a - b) <= rel * abs(a), (runs["f32"], runs[precision])
    path = tmp_path / "m.safetensors"
    m.save(path, optimizer=opt)
    back = GPT.load(path)
    opt2 = back.optimizer(lr=5e-3, precision=precision)
    back.load_optimizer(path, opt2)
    for x, y in batches[3:]:
        assert m.train_step(opt, x, y) == back.train_step(opt2, x, y)
    return runs["f32"], runs[precision], m


def test_mixed_precision_follows_f32_and_resumes_bit_for_bit(tmp_path):
    """precision="mixed": f16 matmuls with loss scaling stay within f16's rounding of the f32
    run from the same weights; the scaler goes through save/load_optimizer."""
    if not wgml.info()["has_shader_f16"]:
        pytest.skip("no shader-f16")
    f32, mixed, m = _against_f32_then_resumed(tmp_path, "mixed", 1e-2)
    assert f32 != mixed  # the matmuls did round to f16
    with pytest.raises(ValueError, match="precision"):
        m.optimizer(precision="f16")


def test_f32split_follows_f32_and_resumes(tmp_path):
    """precision="f32split": f32 matmuls as hi and lo halves on the matrix units (the f32
    kernels where there are none: then the very losses of "f32"), within f32-class error of
    the f32 run from the same weights; the run's precision goes through save and load."""
    f32, split, _ = _against_f32_then_resumed(tmp_path, "f32split", 1e-4)
    if not wgml.info().get("has_subgroup_matrix"):
        assert f32 == split
    ctx = wgml.Context()
    ctx.precision = "f32split"
    assert ctx.precision == "f32split"


def test_bad_files_raise_clear_errors(tmp_path):
    missing = tmp_path / "none.safetensors"
    with pytest.raises(wgml.FileError, match="none.safetensors") as e:
        GPT.load(missing)
    assert isinstance(e.value, OSError)
    m = GPT.new(vocab=20, block=8, layers=1, heads=2, width=16)
    m.save(tmp_path / "ok.safetensors")
    data = (tmp_path / "ok.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:200])
    with pytest.raises(wgml.Error, match="cut.safetensors") as e:
        GPT.load(tmp_path / "cut.safetensors")
    assert isinstance(e.value, (wgml.FormatError, wgml.ShapeError))
    (tmp_path / "junk.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(wgml.FormatError, match="junk.safetensors"):
        GPT.load(tmp_path / "junk.safetensors")


def test_a_model_of_more_than_256_tokens_takes_ids():
    m = GPT.new(vocab=300, block=8, layers=1, heads=2, width=16, seed=2)
    assert m.vocab is None and m.vocab_size == 300
    with pytest.raises(ValueError, match="300 tokens are ids"):
        m.encode("hi")
    with pytest.raises(ValueError, match="300 tokens are ids"):
        m.decode_bytes([1, 299])
    out = m.generate(np.array([[5, 299]], dtype=np.int32), 3, temperature=0)
    assert np.asarray(out).size == 3 and np.asarray(out).max() < 300
    # text in or out needs bytes: the default prompt "" too
    with pytest.raises(ValueError, match="300 tokens are ids"):
        m.generate(max_new_tokens=3)


def test_bad_configs_and_arguments():
    with pytest.raises(wgml.InvalidArgumentError, match="heads = 3 does not divide width = 16"):
        GPT.new(vocab=20, heads=3, width=16)
    with pytest.raises(ValueError, match="arch"):
        GPT.new(vocab=20, arch="bert")
    with pytest.raises(wgml.InvalidArgumentError, match="heads = 3"):
        GPTConfig(vocab=20, heads=3, width=16).resolved()
    m = GPT.new(vocab=20, block=8, layers=1, heads=2, width=16)
    with pytest.raises(ValueError, match="0..19"):
        m.eval_loss([1, 2, 20], [1, 2, 3])
    with pytest.raises(ValueError, match="differ in shape"):
        m.eval_loss([1, 2, 3], [1, 2])
    with pytest.raises(wgml.Error):
        m.logits(np.zeros((1, 9), dtype=np.int32))  # past the block
    with pytest.raises(TypeError):
        m.logits([0.5, 1.0])


def test_llama_from_python():
    m = GPT.new(vocabulary=TEXT, arch="llama", block=16, layers=1, heads=4, kv_heads=2, width=32, seed=2)
    c = m.config
    assert c.arch == "llama" and c.kv_heads == 2 and c.ffn == 96 and c.rope_base == 10000.0
    assert "h.0.mlp.wgu" in m.state_dict()
    opt = m.optimizer(lr=1e-2)
    x, y = m.batch(TEXT, 4, seed=1)
    before = m.eval_loss(x, y)
    for _ in range(10):
        m.train_step(opt, x, y)
    assert m.eval_loss(x, y) < before - 0.3
    out = m.generate("the ", 20, temperature=0)
    assert len(out) == 20 and out == m.generate("the ", 20, temperature=0)


def test_closing():
    ctx = wgml.Context()
    m = GPT.new(vocab=20, block=8, layers=1, heads=2, width=16, ctx=ctx)
    opt = m.optimizer()
    m.close()
    with pytest.raises(wgml.ContextError):
        m.eval_loss([1], [2])
    with pytest.raises(wgml.ContextError):
        opt.steps
    with GPT.new(vocab=20, block=8, layers=1, heads=2, width=16, ctx=ctx) as m2:
        opt2 = m2.optimizer()
        ctx.close()  # frees the model and its optimiser first
        with pytest.raises(wgml.ContextError):
            m2.generate([1], 3)
        with pytest.raises(wgml.ContextError):
            opt2.lr


def test_public_methods_have_docstrings_and_type_hints():
    import wgml.gpt
    missing = []
    for cls in (GPT, GPTConfig, wgml.gpt.GPTOptimizer):
        assert (cls.__doc__ or "").strip()
        for name, obj in vars(cls).items():
            if name.startswith("_") or not (callable(obj) or isinstance(obj, (property, classmethod, staticmethod))):
                continue
            fn = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
            if not (fn.__doc__ or "").strip():
                missing.append("%s.%s: no docstring" % (cls.__name__, name))
            if "return" not in fn.__annotations__:
                missing.append("%s.%s: no return type" % (cls.__name__, name))
    assert not missing, missing


def test_more_positions_than_the_block_are_refused():
    m = GPT.new(vocabulary=TEXT, block=8, layers=1, heads=2, width=16, seed=1)
    ids = np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9]])  # 9 > block 8
    opt = m.optimizer(lr=1e-3)
    for call in (lambda: m.logits(ids), lambda: m.eval_loss(ids, ids), lambda: m.train_step(opt, ids, ids)):
        with pytest.raises(wgml.ShapeError, match="more positions than the model's block of 8"):
            call()
    assert m.logits(ids[:, :8]).shape == (1, 8, m.vocab_size)  # the block itself is fine


def test_generate_takes_one_prompt():
    m = GPT.new(vocabulary=TEXT, block=8, layers=1, heads=2, width=16, seed=1)
    with pytest.raises(ValueError, match="generate_batch"):
        m.generate(np.array([[1, 2], [3, 4]]), max_new_tokens=2)
    assert len(m.generate(np.array([[1, 2]]), max_new_tokens=3, temperature=0)) == 3
