"""Compile time of a 12-block model whose block is a ``torch.compiler.nested_compile_region``,
against the same model without it and against torch.compile with it (same run).

    python tools/bench_regions.py [--backend inductor] [--blocks 12] [--dim 256]

Each compile runs in a fresh subprocess (so no system benefits from another's warm caches in
the process), with Inductor's caches off (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1). Prints the
first-call time of each and the ratios: pydynamo with regions / without (target <= 1/3) and
pydynamo / torch.compile, both with regions (target <= 1/2).
"""
import argparse
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import sys, time, torch
import pydynamo
system, region, backend, blocks, dim, device = sys.argv[1], sys.argv[2] == "1", sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
    def body(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, 4, c // 4).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(c, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))
class RegionBlock(Block):
    @torch.compiler.nested_compile_region
    def forward(self, x):
        return self.body(x)
class PlainBlock(Block):
    def forward(self, x):
        return self.body(x)
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList((RegionBlock if region else PlainBlock)() for _ in range(blocks))
    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x
torch.manual_seed(0)
m = Model().to(device).eval()
x = torch.randn(4, 64, dim, device=device)
warm = torch.nn.Linear(8, 8).to(device)  # first-use costs of the backend, outside the timing
with torch.no_grad():
    (torch.compile(warm, backend=backend) if system == "torch" else pydynamo.optimize(backend)(warm))(torch.randn(2, 8, device=device))
    fn = torch.compile(m, backend=backend) if system == "torch" else pydynamo.optimize(backend)(m)
    if device == "cuda": torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(x)
    if device == "cuda": torch.cuda.synchronize()
    print(time.perf_counter() - t0)
"""


def run(system, region, a, device):
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    times = []
    for _ in range(a.repeat):
        out = subprocess.run([sys.executable, "-c", _CHILD, system, "1" if region else "0", a.backend, str(a.blocks),
                              str(a.dim), device], capture_output=True, text=True, env=env, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="inductor")
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--repeat", type=int, default=1, help="runs per system (the median is printed)")
    a = p.parse_args()
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ours_r = run("pydynamo", True, a, device)
    ours_p = run("pydynamo", False, a, device)
    torch_r = run("torch", True, a, device)
    print(f"device {device}; backend {a.backend}; {a.blocks} blocks, dim {a.dim}; torch {torch.__version__}; "
          f"python {sys.version.split()[0]}")
    print(f"first call s: pydynamo with regions {ours_r:.2f}, without {ours_p:.2f}; torch.compile with regions {torch_r:.2f}")
    print(f"ratio with/without regions (pydynamo): {ours_r / ours_p:.3f}")
    print(f"ratio pydynamo/torch.compile (regions): {ours_r / torch_r:.3f}")


if __name__ == "__main__":
    main()
