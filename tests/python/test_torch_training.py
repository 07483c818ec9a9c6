"""tests/python/test_torch_training.py - DDP trains on the "conccl" backend, as a user runs it.

Runs examples/python/fsdp2_train.py (the script users start with torchrun; here with
its --nprocs launcher, since Debian 12's torch 1.13 torchrun fails on Python 3.11)
on the emulated node with CPU tensors: a small transformer, DDP, 2 and 4 processes,
20 steps, --check. The script trains, in every process and with no collective, the
reference the step must equal (every rank's batch in turn, the gradients combined in
rank order as DDP's all-reduce defines them, the same AdamW) and exits 1 unless
every step's loss and the final parameters equal it bit for bit. The test asserts
the exit status, the script's record (per-step losses, the loss going down, the
check's result) and that FSDP2 says what torch it needs where torch has none.

Run by ctest (tests/python/CMakeLists.txt, Python.TorchTraining) with
PYTHONPATH=python and CONCCL_LIBRARY=<build>/src/libconccl.so.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:  # pragma: no cover - skipped, saying why
    torch = None

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python", "fsdp2_train.py")
SMALL = ["--layers", "2", "--dim", "64", "--heads", "4", "--seq", "32", "--batch", "4", "--vocab", "128"]


@unittest.skipIf(torch is None, "torch is not installed for this python3 (apt-get install python3-torch)")
class TorchTrainingTest(unittest.TestCase):
    def train(self, n, mode, steps, *extra):
        with tempfile.TemporaryDirectory(prefix="conccl-train-") as tmp:
            rec = os.path.join(tmp, "run.json")
            env = dict(os.environ, CONCCL_BACKEND="emu")
            p = subprocess.run([sys.executable, SCRIPT, "--nprocs", str(n), "--mode", mode, "--device", "cpu",
                                "--steps", str(steps), "--json", rec, "--timeout", "60"] + SMALL + list(extra),
                               env=env, capture_output=True, text=True, timeout=240)
            record = None
            if os.path.exists(rec):
                with open(rec) as f:
                    record = json.load(f)
        return p, record

    def check_ddp(self, n):
        p, rec = self.train(n, "ddp", 20, "--check")
        out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 0, out[-3000:])
        self.assertIn("equal bit for bit", p.stdout, out[-3000:])
        self.assertIsNotNone(rec, out[-3000:])
        self.assertEqual((rec["mode"], rec["world_size"], rec["steps"]), ("ddp", n, 20))
        self.assertTrue(rec["exact"], rec)
        self.assertEqual((rec["max_loss_diff"], rec["max_param_diff"]), (0.0, 0.0))
        losses = rec["losses"]
        self.assertEqual(len(losses), 20)
        self.assertLess(sum(losses[-5:]) / 5, losses[0] - 0.2, f"the loss did not go down: {losses}")

    def test_ddp_2_processes(self):
        self.check_ddp(2)

    def test_ddp_4_processes(self):
        self.check_ddp(4)

    def test_fsdp2_names_what_it_needs(self):
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401 - torch >= 2.6
            has_fsdp2 = True
        except Exception:  # noqa: BLE001 - ImportError; on 1.13 with Python 3.11 a ValueError
            has_fsdp2 = False
        if has_fsdp2:
            self.skipTest(f"torch {torch.__version__} has FSDP2: it runs on the GPU machine (docs/perf)")
        p, _ = self.train(2, "fsdp2", 1)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("needs torch >= 2.4", p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
