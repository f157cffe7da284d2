"""The GPU's read-only bandwidth in GB/s (torch: the sum of a 4 GiB float tensor, median of
10 timed with CUDA events), printed alone: the floors of tools/gpu/*.sh divide a step's
bytes by it (issue 20: a read-only rate, not a device-to-device copy)."""
import torch

x = torch.ones(2**30, dtype=torch.float32, device="cuda")  # 4 GiB
for _ in range(3):
    x.sum()
ts = []
for _ in range(10):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    x.sum()
    b.record()
    b.synchronize()
    ts.append(a.elapsed_time(b))
ts.sort()
print(f"{x.numel() * 4 / (ts[len(ts) // 2] / 1e3) / 1e9:.1f}")
