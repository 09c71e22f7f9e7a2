"""The devices PyTorch sees, the process's memory, the GEMM peak, and opening a device for a
request."""

import math
import platform
import resource
import sys
import time

import torch



PRECISIONS = ["f32", "f16", "bf16", "amp-f16", "amp-bf16"]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def proc_field(path, field):
    """The number of a `Field:   N` line of a /proc file; None where there is no such file."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def proc_kib_field(path, field):
    """A `Field:   N kB` line of a /proc file, in bytes; None where there is no such file."""
    kib = proc_field(path, field)
    return None if kib is None else kib * 1024


def memory_bytes():
    return proc_kib_field("/proc/meminfo", "MemTotal")


def probe():
    devices = [{
        "spec": "cpu", "name": cpu_model(), "kind": "cpu", "available": True, "reason": None,
        "precisions": PRECISIONS, "default": True, "memory_bytes": memory_bytes(), "runtime": None,
    }]
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for i in range(count):
        p = torch.cuda.get_device_properties(i)
        precisions = [p for p in PRECISIONS if "bf16" not in p or torch.cuda.is_bf16_supported()]
        devices.append({
            "spec": "cuda:%d" % i, "name": p.name, "kind": "discrete-gpu", "available": True,
            "reason": None, "precisions": precisions, "default": False,
            "memory_bytes": p.total_memory,
            "runtime": {"api": "cuda", "driver": torch.version.cuda, "cpu_emulated": False,
                        "fusion": None, "autotune": None, "autotune_cache": None,
                        "autotune_cache_dir": None,
                        "compute_capability": "%d.%d" % (p.major, p.minor)},
        })
    if count == 0:
        devices.append(unavailable("cuda:0", "PyTorch sees no CUDA device (no NVIDIA driver, or a CPU-only torch)"))
    if torch.backends.mps.is_available():
        devices.append({
            "spec": "mps", "name": "Apple GPU (MPS)", "kind": "integrated-gpu", "available": True,
            "reason": None, "precisions": PRECISIONS, "default": False, "memory_bytes": None,
            "runtime": {"api": "mps", "driver": None, "cpu_emulated": False, "fusion": None,
                        "autotune": None, "autotune_cache": None, "autotune_cache_dir": None},
        })
    else:
        devices.append(unavailable("mps", "PyTorch reports no MPS device: MPS needs macOS on Apple silicon"))
    return devices


def unavailable(spec, why):
    return {"spec": spec, "name": spec, "kind": "integrated-gpu" if spec == "mps" else "discrete-gpu",
            "available": False, "reason": why, "precisions": [], "default": False,
            "memory_bytes": None, "runtime": None}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def peak_rss_bytes():
    peak = proc_kib_field("/proc/self/status", "VmHWM")
    if peak is not None:
        return peak
    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return raw if sys.platform == "darwin" else raw * 1024


def thread_count():
    """This process's threads now (`Threads:` in /proc/self/status): torch's pools, Python's
    own; None where there is no such file."""
    return proc_field("/proc/self/status", "Threads")


def reset_peak_rss():
    """Reset the high-water mark to the current RSS (Linux >= 4.0); False where the OS cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def current_rss_bytes():
    return proc_kib_field("/proc/self/status", "VmRSS")


def gemm_peak(device, dtype):
    """Best GFLOP/s of square products: grow from 512 until one takes 0.1 s (<= 8192), best of 5."""
    def measure(n, reps):
        a = torch.rand((n, n), device=device, dtype=dtype) * 2 - 1
        b = torch.rand((n, n), device=device, dtype=dtype) * 2 - 1
        a @ b
        sync(device)
        best = math.inf
        for _ in range(reps):
            t = time.perf_counter()
            a @ b
            sync(device)
            best = min(best, time.perf_counter() - t)
        return 2.0 * n ** 3 / best / 1e9, best

    n = 512
    while n < 8192 and measure(n, 1)[1] < 0.1:
        n *= 2
    gflops, _ = measure(n, 5)
    return {"gflops": gflops, "matrix": n, "reps": 5, "cached": False}



def open_device(record, spec, precision, amp):
    """The torch device `spec` names, its name in the record; None (the record skipped, with
    the reason) when it is missing or lacks the precision (or any amp precision, unless `amp`)."""
    d = {d["spec"]: d for d in probe()}.get(spec)
    if d is None or not d["available"]:
        record["status"] = "skipped"
        record["reason"] = "device %s unavailable: %s" % (spec, d["reason"] if d else "PyTorch has no device " + spec)
        return None
    record["device_name"] = d["name"]
    if precision not in d["precisions"] or (precision.startswith("amp") and not amp):
        record["status"] = "skipped"
        record["reason"] = "pytorch does not support %s on %s here" % (precision, spec)
        return None
    return torch.device(spec)
