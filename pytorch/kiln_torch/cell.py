"""One cell under the protocol: the sample order of kiln-data (SplitMix64 Fisher-Yates per
epoch), the data file xtask exports, and the timed training loop."""

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

from common import emit
from machine import current_rss_bytes, peak_rss_bytes, reset_peak_rss, sync
from warmup import Warmup, budget_spent


MASK64 = (1 << 64) - 1


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
# Kiln's precisions in torch's types, written once: the type pure f16/bf16 weights live in,
# and the type amp-* autocasts to (its master weights stay f32).
PURE = {"f16": torch.float16, "bf16": torch.bfloat16}
AMP = {"amp-f16": torch.float16, "amp-bf16": torch.bfloat16}


def weights_dtype(precision):
    """The type the weights live in at `precision`: the pure type, else f32."""
    return PURE.get(precision, torch.float32)


def step_args(req, batch):
    """The loop's arguments for single steps outside a timed cell (explain's whole step,
    verify's steps) from their request `req`: every key Cell reads (kiln-core's
    models.rs test holds it), the cell-only ones (budget, timing, warm-up) off."""
    return argparse.Namespace(batch_size=batch, budget_seconds=None, precision=req["precision"],
                              accum_steps=1, learning_rate=req["learning_rate"], epochs=1,
                              seed=req["seed"], timing=None, warmup_cap_seconds=None,
                              loss_scaling=None, inject_slow_steps=None)


class Cell:
    def __init__(self, args, device, model, x, y, tx, ty):
        self.args, self.device, self.model = args, device, model
        self.x, self.y, self.tx, self.ty = x, y, tx, ty
        self.n = x.shape[0]
        self.batch = args.batch_size
        self.steps_per_epoch = -(-self.n // self.batch)
        self.budget = args.budget_seconds
        self.started = time.perf_counter()
        self.last_progress = self.started
        self.warmup = Warmup(args.timing, args.warmup_cap_seconds, args.inject_slow_steps)
        self.chunks = []  # (steps, samples, seconds)
        self.steps_done = 0
        self.opt = torch.optim.Adam(model.parameters(), lr=self.args.learning_rate, eps=1e-8)
        p = args.precision
        self.amp = AMP.get(p)
        self.pure = PURE.get(p)
        # --loss-scaling: dynamic (GradScaler) for amp-f16, none for amp-bf16 unless asked.
        scaling = args.loss_scaling or ("dynamic" if p == "amp-f16" else "none")
        self.scaling = scaling if self.amp else None
        self.scaler = (torch.amp.GradScaler(device.type, init_scale=65536.0, growth_interval=2000)
                       if self.amp and scaling == "dynamic" else None)
        self.skipped = 0
        self.applied = 0

    def budget_exhausted(self, open_steps, mark, open_excluded):
        # The budget counts timed steady-state training only (warmup.budget_spent).
        return self.warmup.steady_at is not None and budget_spent(
            self.budget, self.args.timing["min_timed_steps"], [(c[0], c[2]) for c in self.chunks],
            open_steps, time.perf_counter() - mark - open_excluded)

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
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
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
            self.applied += 1
        return total

    def epoch(self, epoch):
        order = torch.tensor(epoch_permutation(self.n, self.args.seed, epoch), device=self.device)
        # The request's timing rules (kiln-contract' TimingRules), the Rust runners' own: chunks of
        # an epoch's tenth, closed by time too (a twelfth of the budget) in a slow cell.
        timing = self.args.timing
        chunk_len = max(self.steps_per_epoch // max(timing["chunks_per_epoch"], 1), 1)
        chunk_time = self.budget / timing["chunks_per_budget"] if self.budget is not None else math.inf
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float32)
        sync(self.device)
        t0 = time.perf_counter()
        mark = t0
        chunk_steps = chunk_samples = steps = samples = 0
        chunk_excluded = excluded = 0.0
        partial = False
        self.warmup.first_step_starts(t0)
        for s in range(self.steps_per_epoch):
            start, end = s * self.batch, min((s + 1) * self.batch, self.n)
            began = time.perf_counter()
            loss = self.step(order[start:end])
            self.warmup.inject(self.steps_done + 1)
            loss_sum = loss_sum + loss.float() * (end - start)
            steps += 1
            samples += end - start
            self.steps_done += 1
            if self.warmup.steady_at is None:
                # Warm-up: each step synced and kept apart, never in a chunk.
                sync(self.device)
                now = time.perf_counter()
                phase = self.warmup.step(now - mark, now, epoch + 1)
                if phase == "settled":
                    # The warm-up's peak apart: from here on the high-water mark is steady state's.
                    peak = peak_rss_bytes()
                    self.warmup.peak_rss = peak if reset_peak_rss() else None
                mark = now
                self.progress(epoch, s + 1)
                if phase == "over_cap":
                    partial = True
                    break
                continue
            # Steady: every step is checked for a late compile by its host time (no sync).
            late = self.warmup.timed_step(time.perf_counter() - began, self.steps_done, epoch + 1)
            chunk_excluded += late
            excluded += late
            chunk_steps += 1
            chunk_samples += end - start
            last = s + 1 == self.steps_per_epoch
            if (chunk_steps == chunk_len or time.perf_counter() - mark >= chunk_time) and not last:
                sync(self.device)
                now = time.perf_counter()
                self.chunks.append((chunk_steps, chunk_samples, now - mark - chunk_excluded))
                mark = now
                chunk_steps = chunk_samples = 0
                chunk_excluded = 0.0
                if not math.isfinite(loss_sum.item()):
                    break
            self.progress(epoch, s + 1)
            if not last and self.budget_exhausted(chunk_steps, mark, chunk_excluded):
                partial = True
                break
        sync(self.device)
        now = time.perf_counter()
        if chunk_steps > 0:
            self.chunks.append((chunk_steps, chunk_samples, now - mark - chunk_excluded))
        mark = now
        mean_loss = loss_sum.item() / max(samples, 1)
        return {"epoch": epoch + 1, "seconds": mark - t0 - excluded, "steps": steps, "samples": samples,
                "partial": partial, "mean_loss": mean_loss, "test_accuracy": None,
                "rss_bytes": current_rss_bytes()}, partial

    def progress(self, epoch, step):
        if time.perf_counter() - self.last_progress >= 2.0:
            self.last_progress = time.perf_counter()
            emit({"event": "progress", "epoch": epoch + 1, "step": step,
                  "steps_per_epoch": self.steps_per_epoch,
                  "elapsed_seconds": self.last_progress - self.started, "eta_seconds": self.eta(epoch, step)})

    def eta(self, epoch, step):
        # From the last steady chunk's pace; none before it (warm-up steps are not the pace).
        if not self.chunks:
            return None
        per_step = self.chunks[-1][2] / self.chunks[-1][0]
        left = self.args.epochs * self.steps_per_epoch - (epoch * self.steps_per_epoch + step)
        eta = per_step * max(left, 0)
        if self.budget is not None and self.warmup.steady_at is not None:
            eta = min(eta, max(self.budget - sum(c[2] for c in self.chunks), 0) + per_step)
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
    """Train the cell; return what was measured (kiln-contract' Measurements): Kiln derives the
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
            "first_step_seconds": cell.warmup.first_step_seconds(), "warmup": cell.warmup.summary(), "epochs": epochs,
            "chunks": [{"steps": st, "samples": sa, "seconds": se} for st, sa, se in cell.chunks],
            "diverged": diverged, "device_memory": None, "loss_scaling": None,
            "rss_baseline_bytes": baseline, "rss_peak_bytes": peak_rss_bytes(),
            "peak_since_baseline": since_baseline}
