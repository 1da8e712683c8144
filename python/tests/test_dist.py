"""wgml.dist: a Python training loop on 2 ranks under Open MPI's mpirun (lavapipe) against one
process with the whole batch; the calls outside a launcher."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import wgml
import wgml.dist as dist

SCRIPT = r'''
import sys
import numpy as np
import wgml.dist as dist
from wgml.gpt import GPT
import wgml

out = sys.argv[1]
dist.init()
r, n = dist.rank(), dist.size()
text = "".join("line %d: the quick brown fox jumps over the lazy dog\n" % i for i in range(200))
# rank 1 starts from other weights: broadcast must give it rank 0's
model = GPT.new(seed=1 + r, vocabulary=text, block=16, layers=1, heads=2, width=32)
dist.broadcast(model)
start = model.state_dict()
opt = model.optimizer(lr=3e-3, max_grad_norm=1.0)
dist.data_parallel(opt)
losses = []
for step in range(4):
    ids, targets = model.batch(text, 8, seed=step)
    loss = model.train_step(opt, ids[r::n], targets[r::n])
    losses.append(dist.all_reduce_host([loss])[0])
t = wgml.tensor(np.arange(7, dtype=np.float32) + 10 * r)
dist.all_reduce(t, op="mean")
s = dist.stats()
np.savez(out % r, losses=np.array(losses), mean=t.numpy(), calls=s["calls"], ranks=n,
         **{"start_" + k: v for k, v in start.items()}, **{"end_" + k: v for k, v in model.state_dict().items()})
dist.finalize()
'''


def _run(cmd, tmp_path):
    # (the package this test imports, wherever it lies: a wheel's, or the source tree's)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(wgml.__file__))] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    if p.returncode and "built without MPI" in p.stderr:
        pytest.skip("this wgml was built without MPI (-DWGML_MPI=OFF)")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def test_two_ranks_train_as_one_process(tmp_path):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("no mpirun (Open MPI)")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    _run([sys.executable, str(script), str(tmp_path / "one%d.npz")], tmp_path)
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2"]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    _run(cmd + [sys.executable, str(script), str(tmp_path / "two%d.npz")], tmp_path)
    one, r0, r1 = (np.load(tmp_path / f) for f in ("one0.npz", "two0.npz", "two1.npz"))
    assert int(one["ranks"]) == 1 and int(r0["ranks"]) == 2
    # broadcast: rank 1, made from another seed, starts from rank 0's weights (those of one process)
    starts = [k for k in r0.files if k.startswith("start_")]
    assert starts
    for k in starts:
        np.testing.assert_array_equal(r1[k], r0[k])
        np.testing.assert_array_equal(r0[k], one[k])
    # 2 ranks x 4 sequences take the steps of 1 process x 8; both ranks end alike
    np.testing.assert_allclose(r0["losses"], one["losses"], rtol=1e-5)
    np.testing.assert_array_equal(r0["losses"], r1["losses"])
    for k in (k for k in r0.files if k.startswith("end_")):
        np.testing.assert_array_equal(r1[k], r0[k])
        np.testing.assert_allclose(r0[k], one[k], rtol=1e-3, atol=3e-5)  # (AdamW magnifies the sums' rounding near 0)
    assert not np.array_equal(r0["end_" + starts[0][6:]], r0[starts[0]])  # it trained
    # all_reduce's mean of [0..6] and [10..16]; the data-parallel steps were counted
    np.testing.assert_allclose(r0["mean"], np.arange(7) + 5.0)
    np.testing.assert_array_equal(r1["mean"], r0["mean"])
    assert int(r0["calls"]) >= 4


def test_outside_a_launcher_one_rank_and_data_left_alone():
    dist.init()
    assert (dist.rank(), dist.size(), dist.local_rank(), dist.local_size()) == (0, 1, 0, 1)
    t = wgml.tensor(np.array([1.5, -2.0, 3.25], dtype=np.float32))
    dist.all_reduce(t)
    dist.broadcast([t])
    np.testing.assert_array_equal(t.numpy(), [1.5, -2.0, 3.25])
    np.testing.assert_array_equal(dist.all_reduce_host([2.5, 4.0], op="sum"), [2.5, 4.0])
    dist.barrier()
    with pytest.raises(ValueError):
        dist.all_reduce(t, op="max")
    with pytest.raises(TypeError):
        dist.broadcast([1.0])
    with pytest.raises(TypeError):
        dist.data_parallel(object())
