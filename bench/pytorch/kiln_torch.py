#!/usr/bin/env python3
"""Kiln's PyTorch reference runner: the protocol of crates/kiln-core, in plain PyTorch.

Same models layer for layer, same Adam (1e-3, eps 1e-8), same batch, same sample order
(SplitMix64 Fisher-Yates per epoch), same synced timing (first step and first epoch apart,
chunks of a tenth of an epoch, stop when the budget ends), same test evaluation. It reports
what it observed (kiln-results' Observed, as JSON); xtask derives the record with the rules and
the fingerprint code every Rust runner's records use, so statistics, projection and labels are
never computed twice. `cargo xtask bench-all` starts it with
the torch environment's Python and `--cell FILE`, the same cell request every Rust runner takes,
whose `data_file` holds the exact samples the Rust runners load. Run by hand:
`python kiln_torch.py --probe`.
"""

import argparse
import ctypes
import json
import math
import os
import platform
import resource
import sys
import time

import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MIN_TIMED_STEPS = 2
MASK64 = (1 << 64) - 1


def finite_or_null(obj):
    """JSON has no NaN or infinity: write them as null, as serde_json does (Kiln reads a null
    loss as NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(v) for v in obj]
    return obj


def emit(obj):
    sys.stdout.write(json.dumps(finite_or_null(obj), allow_nan=False) + "\n")
    sys.stdout.flush()


def note(text):
    sys.stderr.write("kiln-torch: " + text + "\n")


# ---------------------------------------------------------------- sample order (kiln-data rng.rs)
class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, bound):
        zone = MASK64 - (MASK64 % bound)
        while True:
            x = self.next_u64()
            if x < zone:
                return x % bound


def epoch_permutation(n, seed, epoch):
    rng = SplitMix64(seed ^ ((epoch * 0xD1B54A32D192ED03) & MASK64))
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


# ---------------------------------------------------------------- models (kiln-core models.rs)
class MnistCnn(nn.Module):
    """Conv(1->64,k3) > MaxPool2 > Conv(64->512,k3) > MaxPool2 > Dropout2d(0.1) >
    AdaptiveMaxPool(1x1) > Flatten > Linear(512->1024) > ReLU > Linear(1024->10)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 3)
        self.conv2 = nn.Conv2d(64, 512, 3)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout2d(0.1)
        self.fc1 = nn.Linear(512, 1024)
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        x = self.pool(self.conv1(x))
        x = self.pool(self.conv2(x))
        x = self.dropout(x)
        x = F.adaptive_max_pool2d(x, 1).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def conv(cin, cout, k, stride, pad):
    c = nn.Conv2d(cin, cout, k, stride=stride, padding=pad, bias=False)
    nn.init.kaiming_normal_(c.weight, mode="fan_out", nonlinearity="relu")
    return c


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = conv(inplanes, planes, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv(planes, planes, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(conv(inplanes, planes, 1, stride, 0), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision's ResNet18 topology (BasicBlock, [2, 2, 2, 2]) with a 10-class head."""

    def __init__(self, in_channels, classes=10):
        super().__init__()
        self.conv1 = conv(in_channels, 64, 7, 2, 3)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks, inplanes = [], 64
        for planes, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            blocks += [BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes, 1)]
            inplanes = planes
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.blocks(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


MODELS = {
    "mnist-cnn": (lambda: MnistCnn(), (1, 28, 28)),
    "resnet18": (lambda: ResNet18(3), (3, 32, 32)),
    "resnet18-gray": (lambda: ResNet18(1), (1, 28, 28)),
}


def training_flops_per_sample(model, shape):
    """3 x forward multiply-adds x 2 of the convolutions and linear layers (as kiln-core)."""
    macs = [0]

    def hook(module, inputs, output):
        if isinstance(module, nn.Conv2d):
            kh, kw = module.kernel_size
            cin = module.in_channels // module.groups
            macs[0] += cin * module.out_channels * kh * kw * output.shape[2] * output.shape[3]
        elif isinstance(module, nn.Linear):
            macs[0] += module.in_features * module.out_features

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros((1,) + shape))
    model.train(was_training)
    for h in handles:
        h.remove()
    return 6 * macs[0]


# ---------------------------------------------------------------- devices
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


def proc_kib_field(path, field):
    """A `Field:   N kB` line of a /proc file, in bytes; None where there is no such file."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


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


# ---------------------------------------------------------------- data
def load_data(path, train_limit, eval_limit):
    with open(path, "rb") as f:
        magic = f.readline()
        if magic.strip() != b"KILNDATA 1":
            raise SystemExit("%s is not a Kiln data file (KILNDATA 1)" % path)
        header = json.loads(f.readline())
        c, h, w = header["channels"], header["height"], header["width"]
        px = c * h * w
        n_train, n_test = header["train"], header["test"]
        blob = f.read()
    expected = (n_train + n_test) * (px + 1)
    if len(blob) != expected:
        raise SystemExit("%s is cut short: %d of %d data bytes" % (path, len(blob), expected))
    raw = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    o = 0
    train_x = raw[o:o + n_train * px].view(n_train, c, h, w); o += n_train * px
    train_y = raw[o:o + n_train]; o += n_train
    test_x = raw[o:o + n_test * px].view(n_test, c, h, w); o += n_test * px
    test_y = raw[o:o + n_test]
    if train_limit:
        train_x, train_y = train_x[:train_limit], train_y[:train_limit]
    if eval_limit:
        test_x, test_y = test_x[:eval_limit], test_y[:eval_limit]
    mean = torch.tensor(header["mean"]).view(1, c, 1, 1)
    std = torch.tensor(header["std"]).view(1, c, 1, 1)
    norm = lambda x: (x.float() / 255.0 - mean) / std
    return header, norm(train_x), train_y.long(), norm(test_x), test_y.long()


# ---------------------------------------------------------------- the protocol
class Cell:
    def __init__(self, args, device, model, x, y, tx, ty):
        self.args, self.device, self.model = args, device, model
        self.x, self.y, self.tx, self.ty = x, y, tx, ty
        self.n = x.shape[0]
        self.batch = args.batch
        self.steps_per_epoch = -(-self.n // self.batch)
        self.budget = args.budget
        self.started = time.perf_counter()
        self.last_progress = self.started
        self.first_step = None
        self.chunks = []  # (steps, samples, seconds)
        self.steps_done = 0
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
        p = args.precision
        self.amp = {"amp-f16": torch.float16, "amp-bf16": torch.bfloat16}.get(p)
        self.pure = {"f16": torch.float16, "bf16": torch.bfloat16}.get(p)
        self.scaler = torch.amp.GradScaler(device.type, init_scale=65536.0, growth_interval=2000) if self.amp else None
        self.skipped = 0
        self.applied = 0

    def budget_exhausted(self, open_steps):
        timed = sum(c[0] for c in self.chunks) + open_steps
        return (self.budget is not None and time.perf_counter() - self.started >= self.budget
                and self.first_step is not None and timed >= MIN_TIMED_STEPS)

    def step(self, idx):
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        k = self.args.accum_steps
        micro = max(-(-len(idx) // k), 1)
        total = None
        for start in range(0, len(idx), micro):
            part = idx[start:start + micro]
            share = len(part) / len(idx)
            xb, yb = self.x[part], self.y[part]
            if self.pure is not None:
                xb = xb.to(self.pure)
            if self.amp is not None:
                with torch.autocast(self.device.type, dtype=self.amp):
                    logits = self.model(xb)
                loss = F.cross_entropy(logits.float(), yb) * share
                self.scaler.scale(loss).backward()
            else:
                loss = F.cross_entropy(self.model(xb), yb) * share
                loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        if self.scaler is not None:
            before = self.scaler.get_scale()
            self.scaler.step(self.opt)
            self.scaler.update()
            if self.scaler.get_scale() < before:
                self.skipped += 1
            else:
                self.applied += 1
        else:
            self.opt.step()
        return total

    def epoch(self, epoch):
        order = torch.tensor(epoch_permutation(self.n, self.args.seed, epoch), device=self.device)
        chunk_len = max(self.steps_per_epoch // 10, 1)
        # A slow cell closes chunks by time too (a twelfth of the budget), as the Rust runners do.
        chunk_time = self.budget / 12 if self.budget is not None else math.inf
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float32)
        sync(self.device)
        t0 = time.perf_counter()
        mark = t0
        chunk_steps = chunk_samples = steps = samples = 0
        partial = False
        for s in range(self.steps_per_epoch):
            start, end = s * self.batch, min((s + 1) * self.batch, self.n)
            loss = self.step(order[start:end])
            loss_sum = loss_sum + loss.float() * (end - start)
            steps += 1
            samples += end - start
            self.steps_done += 1
            if self.first_step is None:
                sync(self.device)
                now = time.perf_counter()
                self.first_step = now - t0
                mark = now
                continue
            chunk_steps += 1
            chunk_samples += end - start
            last = s + 1 == self.steps_per_epoch
            if (chunk_steps == chunk_len or time.perf_counter() - mark >= chunk_time) and not last:
                sync(self.device)
                now = time.perf_counter()
                self.chunks.append((chunk_steps, chunk_samples, now - mark))
                mark = now
                chunk_steps = chunk_samples = 0
                if not math.isfinite(loss_sum.item()):
                    break
            if time.perf_counter() - self.last_progress >= 2.0:
                self.last_progress = time.perf_counter()
                emit({"event": "progress", "epoch": epoch + 1, "step": s + 1,
                      "steps_per_epoch": self.steps_per_epoch,
                      "elapsed_seconds": self.last_progress - self.started, "eta_seconds": self.eta(epoch, s + 1)})
            if not last and self.budget_exhausted(chunk_steps):
                partial = True
                break
        sync(self.device)
        now = time.perf_counter()
        if chunk_steps > 0:
            self.chunks.append((chunk_steps, chunk_samples, now - mark))
        mark = now
        mean_loss = loss_sum.item() / max(samples, 1)
        return {"epoch": epoch + 1, "seconds": mark - t0, "steps": steps, "samples": samples,
                "partial": partial, "mean_loss": mean_loss, "test_accuracy": None}, partial

    def eta(self, epoch, step):
        if self.chunks:
            per_step = self.chunks[-1][2] / self.chunks[-1][0]
        elif self.steps_done:
            per_step = (time.perf_counter() - self.started) / self.steps_done
        else:
            return None
        left = self.args.epochs * self.steps_per_epoch - (epoch * self.steps_per_epoch + step)
        eta = per_step * max(left, 0)
        if self.budget is not None:
            eta = min(eta, max(self.budget - (time.perf_counter() - self.started), 0) + per_step)
        return eta

    def test_accuracy(self, batch):
        if self.tx.shape[0] == 0:
            return 0.0
        self.model.eval()
        correct = 0
        with torch.no_grad():
            for start in range(0, self.tx.shape[0], batch):
                xb = self.tx[start:start + batch]
                if self.pure is not None:
                    xb = xb.to(self.pure)
                if self.amp is not None:
                    with torch.autocast(self.device.type, dtype=self.amp):
                        logits = self.model(xb)
                else:
                    logits = self.model(xb)
                correct += (logits.argmax(1) == self.ty[start:start + batch]).sum().item()
        return correct / self.tx.shape[0]


def train(cell):
    """Train the cell; return what was measured (kiln-results' Measurements): Kiln derives the
    statistics, the projection and the record from it, with the same rules as for Rust cells."""
    # Model, optimizer and data are ready: the baseline; the peak from here on is training's.
    since_baseline = reset_peak_rss()
    baseline = current_rss_bytes()
    epochs, diverged = [], None
    for e in range(cell.args.epochs):
        summary, partial = cell.epoch(e)
        if not math.isfinite(summary["mean_loss"]):
            diverged = "the training loss became %s in epoch %d" % (summary["mean_loss"], e + 1)
            epochs.append(summary)
            break
        summary["test_accuracy"] = cell.test_accuracy(max(cell.batch, 256))
        emit(dict(event="epoch", **summary))
        epochs.append(summary)
        if partial:
            break
    return {"epoch_samples": cell.n, "test_samples": cell.tx.shape[0],
            "first_step_seconds": cell.first_step, "epochs": epochs,
            "chunks": [{"steps": st, "samples": sa, "seconds": se} for st, sa, se in cell.chunks],
            "diverged": diverged, "device_memory": None, "loss_scaling": None,
            "rss_baseline_bytes": baseline, "rss_peak_bytes": peak_rss_bytes(),
            "peak_since_baseline": since_baseline}

# ---------------------------------------------------------------- explain (kiln-results explain.rs)
EXPLAIN_VERSION = 1
STEP_BATCHES = 4


def explain_layer(op, dtype, device):
    """The layer of one op-list entry, built with PyTorch's modules as the models use them."""
    kind = op["op"]
    if kind == "conv2d":
        m = nn.Conv2d(op["in_channels"], op["out_channels"], op["kernel"], stride=op["stride"],
                      padding=op["padding"], bias=op["bias"])
    elif kind == "max_pool2d":
        m = nn.MaxPool2d(op["kernel"], stride=op["stride"], padding=op["padding"])
    elif kind == "batch_norm":
        m = nn.BatchNorm2d(op["channels"])
    elif kind == "linear":
        m = nn.Linear(op["in_features"], op["out_features"])
    elif kind == "channel_dropout":
        m = nn.Dropout2d(op["per_mille"] / 1000.0)
    elif kind == "relu":
        return lambda x, other, t: F.relu(x), []
    elif kind == "global_max_pool":
        return lambda x, other, t: F.adaptive_max_pool2d(x, 1).flatten(1), []
    elif kind == "global_avg_pool":
        return lambda x, other, t: F.adaptive_avg_pool2d(x, 1).flatten(1), []
    elif kind == "residual_add":
        return lambda x, other, t: x + other, []
    elif kind == "cross_entropy":
        return lambda x, other, t: F.cross_entropy(x, t), []
    else:
        raise ValueError("no layer for op %r" % kind)
    m = m.to(device=device, dtype=dtype).train()
    return (lambda x, other, t: m(x)), list(m.parameters())


class Timer:
    """The request's repeat rules: warm-up runs, then timed runs until `repeats` ran or (after
    at least 3) `op_seconds` were spent; a device sync on both sides of the clock."""

    def __init__(self, req, device):
        self.warmup, self.repeats, self.op_seconds = req["warmup"], req["repeats"], req["op_seconds"]
        self.device = device

    def measure(self, prepare, run):
        samples, spent, i = [], 0.0, 0
        while True:
            timed = i >= self.warmup
            if timed and (len(samples) >= self.repeats or (len(samples) >= 3 and spent >= self.op_seconds)):
                return samples
            value = prepare()
            sync(self.device)
            start = time.perf_counter()
            out = run(value)
            sync(self.device)
            seconds = time.perf_counter() - start
            del out
            if timed:
                samples.append(seconds)
                spent += seconds
            i += 1


def timing(samples):
    s = sorted(samples)
    n = len(s)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return {"median_seconds": median, "min_seconds": s[0], "max_seconds": s[-1], "runs": n}


def explain_site(site, index, timer, dtype, device, classes):
    op = site["op"]
    shape = site["input"]
    layer, params = explain_layer(op, dtype, device)
    frozen, frozen_params = explain_layer(op, dtype, device)
    for p in frozen_params:
        p.requires_grad_(False)
    targets = torch.arange(shape[0], device=device) % classes
    # Fresh inputs for every run, as a step's are (kiln-core explain.rs says why).
    def fresh(tracked):
        x = torch.rand(shape, device=device, dtype=dtype).requires_grad_(tracked)
        other = torch.rand(shape, device=device, dtype=dtype).requires_grad_(True)
        return x, other
    probe_out = layer(*fresh(False), targets)
    seed = torch.ones_like(probe_out)
    timings = []
    phases = {"conv2d": ["forward", "input_grad", "param_grad"], "linear": ["forward", "input_grad", "param_grad"],
              "batch_norm": ["forward", "backward"]}.get(op["op"], ["forward", "input_grad"])
    if not site["input_grad"]:
        phases = [p for p in phases if p != "input_grad"]
    add = op["op"] == "residual_add"
    for phase in phases:
        if phase == "forward":
            samples = timer.measure(lambda: fresh(site["input_grad"]), lambda xo: layer(xo[0], xo[1], targets))
        else:
            net, tracked = {"input_grad": (frozen, True), "param_grad": (layer, False), "backward": (layer, True)}[phase]

            def prepare():
                x, other = fresh(tracked)
                wrt = {"input_grad": [x] + ([other] if add else []), "param_grad": params,
                       "backward": [x] + params}[phase]
                return net(x, other, targets), wrt
            # autograd.grad with a ready seed: only the backward kernels are on the clock.
            samples = timer.measure(prepare, lambda yw: torch.autograd.grad(yw[0], yw[1], seed))
        timings.append({"site": index, "phase": phase, "timing": timing(samples)})
    return timings


def explain(path):
    wall0 = time.perf_counter()
    req = read_request(path, "explain request", "kiln_explain", EXPLAIN_VERSION)
    spec = "cpu" if req["device"] == "default" else req["device"]
    record = {"kiln_explain": EXPLAIN_VERSION, "model": req["model"], "backend": "pytorch",
              "backend_version": "torch " + torch.__version__, "device": spec, "device_name": spec,
              "precision": req["precision"], "batch": req["batch"], "threads": torch.get_num_threads(),
              "warmup": req["warmup"], "repeats": req["repeats"], "status": "failed", "reason": None,
              "sites": req["sites"], "ops": [], "step": None,
              "notes": ["torch eager autograd: each backward is torch.autograd.grad through one layer "
                        "with a ready seed, only the phase's leaves asked for"],
              "wall_seconds": 0.0, "fingerprint": None}
    try:
        device = open_device(record, spec, req["precision"], amp=False)
        if device is None:
            return record
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}.get(req["precision"], torch.float32)
        torch.manual_seed(req["seed"])
        timer = Timer(req, device)
        factory, shape = MODELS[req["model"]]
        classes = 10
        for index, site in enumerate(req["sites"]):
            if site["op"]["op"] == "adam":
                continue
            note("timing site %d (%s)" % (index, site["op"]["op"]))
            record["ops"] += explain_site(site, index, timer, dtype, device, classes)
        note("timing Adam's update and the whole step")
        model = factory().to(device=device, dtype=dtype)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
        params = list(model.parameters())

        def fake_grads():
            for p in params:
                p.grad = torch.rand_like(p)
        update = timer.measure(fake_grads, lambda _: opt.step())
        adam = next(i for i, s in enumerate(req["sites"]) if s["op"]["op"] == "adam")
        record["ops"].append({"site": adam, "phase": "update", "timing": timing(update)})
        batch = req["batch"]
        # A new batch every step, as in training: STEP_BATCHES batches, cycled (as kiln-core).
        x = torch.rand((batch * STEP_BATCHES,) + shape, device=device)
        y = torch.arange(batch * STEP_BATCHES, device=device) % classes
        args = argparse.Namespace(batch=batch, budget=None, precision=req["precision"], accum_steps=1)
        cell = Cell(args, device, factory().to(device=device, dtype=dtype), x, y, x, y)
        batches = [torch.arange(k * batch, (k + 1) * batch, device=device) for k in range(STEP_BATCHES)]
        order = iter(range(10 ** 9))
        record["step"] = timing(timer.measure(lambda: batches[next(order) % STEP_BATCHES],
                                              lambda idx: cell.step(idx)))
        record["status"] = "ok"
    except Exception as e:  # one failed record instead of a traceback-only crash
        fail(record, e)
    record["wall_seconds"] = time.perf_counter() - wall0
    return record


def fail(record, e):
    """Mark `record` failed with the exception's type and message (xtask reads an out-of-memory
    error in it as the result `out of memory`)."""
    record["status"] = "failed"
    record["reason"] = "%s: %s" % (type(e).__name__, e)
    note(record["reason"])


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


# ---------------------------------------------------------------- verify
VERIFY_VERSION = 1


def read_weights(path):
    """A safetensors file of f32 tensors, in the order of their zero-padded name prefixes."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    body = blob[8 + n:]
    out = []
    for key in sorted(k for k in header if k != "__metadata__"):
        e = header[key]
        if e["dtype"] != "F32":
            raise SystemExit("%s: tensor %s is %s, only F32 is read" % (path, key, e["dtype"]))
        a, b = e["data_offsets"]
        out.append((key.split(".", 1)[-1], torch.frombuffer(bytearray(body[a:b]), dtype=torch.float32).view(e["shape"])))
    return out


def write_weights(path, tensors):
    """The safetensors layout kiln-results reads: names prefixed with their position."""
    header, chunks, offset = {}, [], 0
    for i, (name, t) in enumerate(tensors):
        t = t.detach().to("cpu", torch.float32).contiguous()
        raw = ctypes.string_at(t.data_ptr(), t.numel() * 4)  # no numpy needed
        header["%03d.%s" % (i, name)] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(chunks))


def burn_layout(model):
    """(name, parameter, transposed) in Burn's visiting order: a linear layer's weight is
    stored [in, out] there, PyTorch's transposed."""
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    return [(name, p, id(p) in linear) for name, p in model.named_parameters()]


def burn_weights(model):
    """The model's parameters as (name, tensor) in Burn's order and layout."""
    return [(name, p.t() if transposed else p) for name, p, transposed in burn_layout(model)]


def verify(path):
    wall0 = time.perf_counter()
    req = read_request(path, "verify request", "kiln_verify", VERIFY_VERSION)
    spec = "cpu" if req["device"] == "default" else req["device"]
    record = {"kiln_verify": VERIFY_VERSION, "model": req["model"], "backend": "pytorch",
              "backend_version": "torch " + torch.__version__, "device": spec, "device_name": spec,
              "precision": req["precision"], "steps": req["steps"], "batch": req["batch"],
              "threads": torch.get_num_threads(), "status": "failed", "reason": None, "losses": [], "final_weights": None,
              "fault": req.get("fault"), "notes": [], "wall_seconds": 0.0, "fingerprint": None}
    try:
        if req.get("fault"):
            raise ValueError("the reference runner injects no faults")
        device = open_device(record, spec, req["precision"], amp=True)
        if device is None:
            return record
        if not req.get("data_file"):
            raise ValueError("%s: no data_file; cargo xtask verify exports the data" % path)
        header, x, y, _, _ = load_data(req["data_file"], None, 1)
        steps, batch = req["steps"], req["batch"]
        if x.shape[0] < steps * batch:
            raise ValueError("%d steps of batch %d need %d training samples; %s has %d: lower --steps or --batch"
                             % (steps, batch, steps * batch, header["name"], x.shape[0]))
        factory, _ = MODELS[req["model"]]
        torch.manual_seed(req["seed"])
        model = factory()
        for m in model.modules():
            if isinstance(m, (nn.Dropout, nn.Dropout2d)):
                m.p = 0.0
                record["notes"].append("dropout off (probability 0)")
        layout = burn_layout(model)
        if not req.get("weights_in"):  # this run is the reference: its initial weights go out
            write_weights(req["init_out"], burn_weights(model))
        source = req.get("weights_in") or req["init_out"]
        given = read_weights(source)
        if len(given) != len(layout):
            raise ValueError("%s has %d tensors; the model has %d" % (source, len(given), len(layout)))
        with torch.no_grad():
            for i, ((name, p, transposed), (theirs, t)) in enumerate(zip(layout, given)):
                t = t.t() if transposed else t
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError("tensor %d (%s) has shape %s; the model's %s is %s"
                                     % (i, theirs, list(t.shape), name, list(p.shape)))
                p.copy_(t)
        pure = {"f16": torch.float16, "bf16": torch.bfloat16}.get(req["precision"])
        model = model.to(device=device, dtype=pure) if pure is not None else model.to(device)
        x, y = x[:steps * batch].to(device), y[:steps * batch].to(device)
        args = argparse.Namespace(batch=batch, budget=None, precision=req["precision"], accum_steps=1)
        cell = Cell(args, device, model, x, y, x, y)
        for k in range(steps):
            loss = float(cell.step(torch.arange(k * batch, (k + 1) * batch, device=device)))
            record["losses"].append(loss if math.isfinite(loss) else None)
        write_weights(req["final_out"], burn_weights(model))
        record["final_weights"] = req["final_out"]
        record["notes"].append("data %s (the first %d training samples, in order)" % (header["name"], steps * batch))
        record["status"] = "ok"
    except Exception as e:  # one failed record instead of a traceback-only crash
        fail(record, e)
    record["wall_seconds"] = time.perf_counter() - wall0
    return record


# ---------------------------------------------------------------- what this runner observed
def observed(args, status, reason):
    """kiln-results' Observed: the facts of this cell; xtask adds the machine's fingerprint."""
    return {
        "status": status, "reason": reason, "device": args.device, "device_name": args.device,
        "device_kind": None, "runtime": None, "device_memory_bytes": None,
        "backend_version": "torch " + torch.__version__, "threads": torch.get_num_threads(),
        "dataset": "", "data": "synthetic", "notes": [], "flops_per_sample": None, "peak": None,
        "peak_memory_bytes": peak_rss_bytes(), "started_at": int(time.time()), "wall_seconds": 0.0,
        "args": sys.argv[1:], "measurements": None, "loop_overhead": None,
    }


CELL_VERSION = 1


def read_request(path, what, key, version):
    """A JSON request xtask wrote, with the version this runner reads."""
    try:
        with open(path) as f:
            req = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit("error: cannot read the %s %s: %s" % (what, path, e))
    if req.get(key) != version:
        raise SystemExit("error: %s: %s version %r is not %d" % (path, what, req.get(key), version))
    return req


def read_cell(path):
    """The cell request xtask wrote (kiln-results' CellRequest, validated on the Rust side)."""
    cell = read_request(path, "cell request", "kiln_cell", CELL_VERSION)
    if cell.get("model") not in MODELS:
        raise SystemExit("error: %s: this runner has no model %r" % (path, cell.get("model")))
    if not cell.get("data_file"):
        raise SystemExit("error: %s: no data_file; cargo xtask exports the cell's data for this runner" % path)
    if cell.get("training_loop", "kiln") != "kiln" or cell.get("devices"):
        raise SystemExit("error: %s: the PyTorch reference trains its own loop on one device; "
                         "training_loop %r and devices %r are for Burn's runners"
                         % (path, cell.get("training_loop"), cell.get("devices")))
    return argparse.Namespace(
        model=cell["model"], device=cell["device"], precision=cell["precision"],
        epochs=cell["epochs"], batch=cell["batch_size"], budget=cell["budget_seconds"],
        seed=cell["seed"], data_file=cell["data_file"], train_limit=cell["train_limit"],
        eval_limit=cell["eval_limit"], accum_steps=cell["accum_steps"],
        quick=cell["profile"] == "quick", no_calibrate=not cell["calibrate"],
        calibrate_only=cell.get("calibrate_only", False), given_peak=cell.get("given_peak"))


def run(args, record):
    wall0 = time.perf_counter()
    devices = {d["spec"]: d for d in probe()}
    spec = "cpu" if args.device == "default" else args.device
    d = devices.get(spec)
    record["device"] = spec
    if d is None or not d["available"]:
        record["status"] = "skipped"
        record["reason"] = "device %s unavailable: %s" % (spec, d["reason"] if d else "PyTorch has no device " + spec)
        return record
    record["device_name"], record["device_kind"], record["runtime"] = d["name"], d["kind"], d["runtime"]
    if args.precision not in d["precisions"]:
        record["status"] = "skipped"
        record["reason"] = "pytorch does not support %s on %s" % (args.precision, spec)
        return record
    device = torch.device(spec)
    if device.type == "cuda":
        record["device_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
    # The peak in the type the weights live in, as the Rust runners measure it: the pure type,
    # else f32 (amp keeps f32 master weights).
    weights_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}.get(args.precision, torch.float32)
    if args.given_peak is not None:
        record["peak"] = args.given_peak
    elif not args.no_calibrate or args.calibrate_only:
        record["peak"] = gemm_peak(device, weights_dtype)
        note("GEMM peak %.1f GFLOP/s" % record["peak"]["gflops"])
    if args.calibrate_only:
        record.update(status="ok", reason="GEMM calibration only", wall_seconds=time.perf_counter() - wall0)
        return record
    header, x, y, tx, ty = load_data(args.data_file, args.train_limit, args.eval_limit)
    factory, shape = MODELS[args.model]
    if (header["channels"], header["height"], header["width"]) != shape:
        raise SystemExit("the data file holds %dx%dx%d images; %s takes %dx%dx%d" % (
            header["channels"], header["height"], header["width"], args.model, *shape))
    torch.manual_seed(args.seed)
    model = factory()
    record["flops_per_sample"] = training_flops_per_sample(model, shape)
    pure = {"f16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    model = model.to(device=device, dtype=pure) if pure is not None else model.to(device)
    x, y, tx, ty = x.to(device), y.to(device), tx.to(device), ty.to(device)
    record.update(dataset=header["name"], data=header["origin"])
    if header.get("note"):
        record["notes"].append(header["note"])
    cell = Cell(args, device, model, x, y, tx, ty)
    emit({"event": "start", "model": args.model, "backend": "pytorch", "device": spec,
          "device_name": d["name"], "precision": args.precision, "dataset": header["name"],
          "train_samples": x.shape[0], "test_samples": tx.shape[0],
          "steps_per_epoch": cell.steps_per_epoch, "epochs": args.epochs, "budget_seconds": args.budget})
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    measured = train(cell)
    if device.type == "cuda":
        measured["device_memory"] = {"peak_in_use_bytes": torch.cuda.max_memory_allocated(device),
                                     "peak_reserved_bytes": torch.cuda.max_memory_reserved(device)}
    if cell.scaler is not None:
        measured["loss_scaling"] = {"initial_scale": 65536.0, "final_scale": cell.scaler.get_scale(),
                                    "skipped_steps": cell.skipped, "applied_steps": cell.applied,
                                    "growth_interval": 2000}
    record.update(status="ok", measurements=measured, peak_memory_bytes=peak_rss_bytes(),
                  wall_seconds=time.perf_counter() - wall0)
    return record


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--probe", action="store_true", help="print the devices as JSON")
    p.add_argument("--cell", help="the cell request (JSON) that cargo xtask writes")
    p.add_argument("--explain", help="an explain request (JSON) that cargo xtask explain writes")
    p.add_argument("--verify", help="a verify request (JSON) that cargo xtask verify writes")
    cli = p.parse_args()
    threads = int(os.environ.get("RAYON_NUM_THREADS") or 0) or (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    if cli.probe:
        emit({"backend": "pytorch", "backend_version": "torch " + torch.__version__, "devices": probe()})
        return 0
    for flag, answer in ((cli.explain, explain), (cli.verify, verify)):
        if flag:
            record = answer(flag)
            emit(finite_or_null(record))
            return 1 if record["status"] == "failed" else 0
    if not cli.cell:
        p.error("--cell FILE is required (cargo xtask bench --backend pytorch writes it)")
    args = read_cell(cli.cell)
    record = observed(args, "failed", None)
    try:
        record = run(args, record)
        code = 0
    except Exception as e:  # one failed record instead of a traceback-only crash
        fail(record, e)
        code = 1
    emit(dict(event="observed", **record))
    return code


if __name__ == "__main__":
    sys.exit(main())
