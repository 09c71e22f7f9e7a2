"""`--explain FILE`: one training step taken apart into the ops kiln-contract lists."""

import time

import torch
import torch.nn.functional as F

from common import fail, note, read_request
import contract
from models import Net, input_shape, layer, models
from machine import open_device, sync
from cell import Cell, step_args, weights_dtype
from warmup import steady


EXPLAIN_VERSION = 1
STEP_BATCHES = 4


def explain_layer(op, dtype, device):
    """The layer of one op-list entry, built as the models build it (models.layer)."""
    kind = op["op"]
    if kind == "residual_add":
        return lambda x, other, t: x + other, []
    if kind == "cross_entropy":
        return lambda x, other, t: F.cross_entropy(x, t), []
    m = layer(op).to(device=device, dtype=dtype).train()
    return (lambda x, other, t: m(x)), list(m.parameters())


class Timer:
    """The request's repeat rules (kiln-core's explain Timer): warm-up runs, at least `warmup`
    and then until steady by the request's `timing` rule (warmup.steady) or the cap, then timed
    runs until `repeats` ran or (after at least 3) `op_seconds` were spent; a device sync on
    both sides of the clock."""

    def __init__(self, req, device):
        self.warmup, self.repeats, self.op_seconds = req["warmup"], req["repeats"], req["op_seconds"]
        self.timing, self.cap_runs = req["timing"], req["warmup_cap_runs"]
        self.device = device

    def measure(self, prepare, run):
        warm = []
        while len(warm) < self.warmup or not (
                steady(self.timing, warm) or len(warm) >= self.cap_runs
                or sum(warm) >= 10 * self.op_seconds):
            warm.append(self.once(prepare, run))
        samples, spent = [], 0.0
        while len(samples) < self.repeats and (len(samples) < 3 or spent < self.op_seconds):
            seconds = self.once(prepare, run)
            samples.append(seconds)
            spent += seconds
        return samples

    def once(self, prepare, run):
        value = prepare()
        sync(self.device)
        start = time.perf_counter()
        out = run(value)
        sync(self.device)
        seconds = time.perf_counter() - start
        del out
        return seconds


def timing(samples):
    """The runs' seconds as they are: Kiln summarizes them with its one median
    (kiln-contract' `Timing`)."""
    return {"samples_seconds": list(samples)}


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
    contract.check(req, "explain_request", path)
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
        dtype = weights_dtype(req["precision"])
        torch.manual_seed(req["seed"])
        timer = Timer(req, device)
        shape = input_shape(req["model"])
        classes = models()[req["model"]]["classes"]
        for index, site in enumerate(req["sites"]):
            if site["op"]["op"] == "adam":
                continue
            note("timing site %d (%s)" % (index, site["op"]["op"]))
            record["ops"] += explain_site(site, index, timer, dtype, device, classes)
        note("timing Adam's update and the whole step")
        model = Net(req["model"]).to(device=device, dtype=dtype)
        opt = torch.optim.Adam(model.parameters(), lr=req["learning_rate"], eps=1e-8)
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
        cell = Cell(step_args(req, batch), device, Net(req["model"]).to(device=device, dtype=dtype), x, y, x, y)
        batches = [torch.arange(k * batch, (k + 1) * batch, device=device) for k in range(STEP_BATCHES)]
        order = iter(range(10 ** 9))
        record["step"] = timing(timer.measure(lambda: batches[next(order) % STEP_BATCHES],
                                              lambda idx: cell.step(idx)))
        record["status"] = "ok"
    except Exception as e:  # one failed record instead of a traceback-only crash
        fail(record, e)
    record["wall_seconds"] = time.perf_counter() - wall0
    return record
