"""The examples run (shortened): the MLP learns, the GPT forward matches NumPy, the data-parallel GPT trains."""
import os
import re
import subprocess
import sys

import pytest

import wgml

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
FASHION = os.environ.get("FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def run(*args, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(wgml.__file__)), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable] + list(args), capture_output=True, text=True, env=env, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.skipif(not os.path.isfile(os.path.join(FASHION, "train-images-idx3-ubyte.gz")),
                    reason="no Fashion-MNIST (make deps installs dataset-fashion-mnist)")
def test_mlp_example():
    out = run(os.path.join(EXAMPLES, "mlp_fashion_mnist.py"), "1", "40")  # one epoch of 40 batches
    acc = float(re.search(r"test accuracy ([0-9.]+)", out).group(1))
    assert acc > 0.6, out  # chance is 0.1


def test_gpt_forward_example():
    out = run(os.path.join(EXAMPLES, "gpt_forward.py"), "--tokens", "8")
    assert "largest difference from NumPy" in out


def test_gpt_forward_greedy():
    # temperature 0 is greedy decoding: it used to divide the logits by 0 and sample from NaN
    outs = [run(os.path.join(EXAMPLES, "gpt_forward.py"), "--tokens", "6", "--temperature", "0") for _ in range(2)]
    assert outs[0] == outs[1] and "largest difference from NumPy" in outs[0]


@pytest.mark.skipif(not os.environ.get("WGML_CLI"), reason="WGML_CLI (the wgml command) not set")
def test_gpt_forward_on_a_trained_checkpoint(tmp_path):
    subprocess.run([os.environ["WGML_CLI"], "gpt", "train", "--layers", "1", "--heads", "2", "--width", "32",
                    "--block", "32", "--batch", "4", "--steps", "5", "--eval-every", "0", "--out", str(tmp_path)],
                   check=True, capture_output=True, timeout=300)
    out = run(os.path.join(EXAMPLES, "gpt_forward.py"), "--checkpoint", str(tmp_path / "gpt.safetensors"),
              "--prompt", "The ", "--tokens", "8")
    assert "largest difference from NumPy" in out and "'The " in out


def test_save_resume_example(tmp_path):
    # a whole model and its AdamW state saved mid-run and resumed from the file alone
    out = run(os.path.join(EXAMPLES, "save_resume.py"), "8", str(tmp_path / "resume.safetensors"))
    assert "resumed run identical" in out


def test_gpt_data_parallel_example_as_one_process():
    # (under mpirun tests/test_dist.py checks the ranks against one process)
    out = run(os.path.join(EXAMPLES, "gpt_data_parallel.py"), "--steps", "20", "--layers", "1", "--width", "32",
              "--block", "16", "--batch", "8", "--text", "/nonexistent")
    loss = float(re.search(r"step 20  loss ([0-9.]+)", out).group(1))
    assert 0 < loss < 3.4, out  # a made-up text of 39 symbols: ln 39 = 3.66 knows nothing (20 steps: 2.97)
    assert "1 rank(s): parameters identical" in out
