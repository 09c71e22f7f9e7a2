"""Warm-up to steady state, as kiln-core's warmup.rs and kiln-contract' TimingRules::is_steady:
each warm-up step's synced time, until the rule says steady or the cap runs out; and the
percentiles of a steady series of queries, as kiln-contract' Latency::of. No torch here:
kiln-contract's tests run these rules against Rust's on the same series."""

import math
import os
import time


def process_age_seconds():
    """Seconds since this process started (/proc/self/stat's start time against /proc/uptime),
    as kiln-machine's age_seconds; None off Linux."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


def steady(timing, steps):
    """kiln-contract' TimingRules::is_steady, the same rule on the same keys: the median of the
    last window of synced step times within the tolerance of the window before, and no step
    of the last window over the spike factor times its median."""
    k = max(timing["steady_window"], 1)
    if len(steps) < 2 * k:
        return False
    last, before = steps[-k:], steps[-2 * k:-k]
    m_last, m_before = median(last), median(before)
    if not (math.isfinite(m_last) and m_before > 0):
        return False
    settled = abs(m_last - m_before) <= timing["steady_tolerance"] * m_before
    return settled and all(s <= timing["steady_spike"] * m_last for s in last)


def late_compile(timing, seconds, reference):
    """kiln-contract' TimingRules::late_compile: the excess over `reference` (the steady step) of
    a step after steady state that took `seconds`, when it is a late compile; else None."""
    excess = seconds - reference
    if seconds > timing["late_factor"] * reference and excess > timing["late_floor_seconds"]:
        return excess
    return None


def budget_spent(budget, min_timed_steps, chunks, open_steps, open_seconds):
    """kiln-contract' protocol::budget_spent: the closed chunks' (steps, seconds) and the open
    one's reach the budget with at least `min_timed_steps` steps timed."""
    steps = sum(c[0] for c in chunks) + open_steps
    seconds = sum(c[1] for c in chunks) + open_seconds
    return budget is not None and seconds >= budget and steps >= min_timed_steps


class Warmup:
    """The warm-up clock (kiln-core's warmup.rs): each warm-up step's synced time, until the
    rule says steady or the cap runs out."""

    KEPT_STEPS = 200

    def __init__(self, timing, cap, slow):
        self.timing, self.cap, self.slow = timing, cap, slow
        self.first_step = None
        self.steps = []
        self.steady_at = None
        self.epoch = 0
        self.seconds = 0.0
        # The process's age read once, before training; the age at steady state is derived.
        self.born = (process_age_seconds(), time.perf_counter())
        self.process_seconds = None
        # After steady state (kiln-core's warmup.rs): the synced steady step, the latest steady
        # host step times, and the late compiles the rule caught.
        self.steady_step = 0.0
        self.recent = []
        self.late = []
        self.late_count = 0
        self.late_seconds = 0.0
        # The warm-up's peak resident set, read at steady state (cell.py) before the mark reset.
        self.peak_rss = None

    def first_step_starts(self, at):
        if self.first_step is None:
            self.first_step = at

    def inject(self, step):
        first = self.slow.get("from", 1) if self.slow else 1
        if self.slow and first <= step <= self.slow["steps"] and (step - first) % 2 == 0:
            time.sleep(max(self.slow["seconds"], 0.0))

    def step(self, seconds, now, epoch):
        """Returns "warming", "settled" or "over_cap"."""
        self.steps.append(seconds)
        if self.first_step is None:
            self.first_step = now - seconds
        self.seconds = now - self.first_step
        self.epoch = epoch
        age, at = self.born
        self.process_seconds = None if age is None else age + (now - at)
        if steady(self.timing, self.steps):
            self.steady_at = now
            self.steady_step = median(self.steps[-max(self.timing["steady_window"], 1):])
            return "settled"
        if self.seconds >= self.cap:
            return "over_cap"
        return "warming"

    def timed_step(self, seconds, step, epoch):
        """A step after steady state took `seconds` on the host: its excess over the steady step
        when TimingRules::late_compile calls it a late compile (counted here), else 0."""
        running = median(self.recent) if self.recent else 0.0
        reference = max(self.steady_step, running)
        excess = late_compile(self.timing, seconds, reference)
        if excess is None:
            self.recent = (self.recent + [seconds])[-15:]
            return 0.0
        self.late_count += 1
        self.late_seconds += excess
        if len(self.late) < self.KEPT_STEPS:
            self.late.append({"step": step, "epoch": epoch, "seconds": seconds,
                              "excess_seconds": excess})
        return excess

    def first_step_seconds(self):
        return self.steps[0] if self.steps else None

    def summary(self):
        if not self.steps:
            return None
        summary = {"steady": self.steady_at is not None, "steps": len(self.steps),
                   "seconds": self.seconds, "process_seconds": self.process_seconds,
                   "epoch": self.epoch, "cap_seconds": float(self.cap),
                   "step_seconds": self.steps[:self.KEPT_STEPS]}
        if self.peak_rss is not None:
            summary["peak_rss_bytes"] = self.peak_rss
        if self.late_count:
            summary.update(late_compiles=self.late_count, late_compile_seconds=self.late_seconds,
                           late_compile_steps=self.late)
        return summary


def percentiles(batch, seconds, warmup):
    """kiln-contract' Latency::of: one series' percentiles as MLPerf's loadgen indexes them
    (sorted[floor(n * p)], 0-based), its least, mean and most, with its warm-up."""
    s = sorted(seconds)
    n = len(s)
    q = lambda p: s[min(int(math.floor(p / 100.0 * n)), n - 1)]
    return {"batch": batch, "queries": n, "p50_seconds": q(50), "p90_seconds": q(90),
            "p99_seconds": q(99), "max_seconds": s[-1], "p95_seconds": q(95),
            "p999_seconds": q(99.9), "min_seconds": s[0], "mean_seconds": sum(s) / n,
            "warmup_queries": warmup[0], "warmup_seconds": warmup[1], "steady": warmup[2]}
