"""`--verify FILE`: train K steps from given weights and write the loss curve and final weights."""

import ctypes
import math
import time

import torch
import torch.nn as nn

from common import fail, read_request
import contract
from models import Net
from machine import open_device
from cell import Cell, load_data, step_args, weights_dtype


VERIFY_VERSION = 1


def safetensors_torch():
    """The `safetensors` package's torch module, imported where weights are read or written
    (training needs none); `cargo xtask setup-libtorch` installs it."""
    try:
        import safetensors.torch
    except ImportError:
        raise SystemExit("error: this Python has no `safetensors` package (the weights format); "
                         "run `cargo xtask setup-libtorch`, which installs it beside torch")
    return safetensors.torch


def read_weights(path):
    """A safetensors file of f32 tensors (the `safetensors` package), in the order of their
    zero-padded name prefixes."""
    load_file = safetensors_torch().load_file
    try:
        tensors = load_file(path)
    except Exception as e:  # the package's own error types vary between its versions
        raise SystemExit("%s: not a safetensors file (%s)" % (path, e))
    out = []
    for key in sorted(tensors):
        t = tensors[key]
        if t.dtype != torch.float32:
            raise SystemExit("%s: tensor %s is %s, only F32 is read" % (path, key, t.dtype))
        out.append((key.split(".", 1)[-1], t))
    return out


def save_tensors(path, named):
    """`named` (name: tensor) as an F32 safetensors file, through the package's serializer
    (its torch module's save_file needs numpy, which a torch install may lack)."""
    safetensors_torch()
    import safetensors
    entries = {}
    for name, t in named.items():
        t = t.detach().to("cpu", torch.float32).contiguous()
        entries[name] = {"dtype": "float32", "shape": list(t.shape),
                         "data": ctypes.string_at(t.data_ptr(), t.numel() * 4)}
    safetensors.serialize_file(entries, path)


def write_weights(path, tensors):
    """The layout kiln-contract reads: F32 tensors named with their position first."""
    save_tensors(path, {"%03d.%s" % (i, name): t for i, (name, t) in enumerate(tensors)})


def load_weights(model, source):
    """Replace `model`'s parameters, in Burn's order and layout, by those of the file `source`;
    a count or shape that differs is an error naming the tensor."""
    layout, given = model.names, read_weights(source)
    if len(given) != len(layout):
        raise ValueError("%s has %d tensors; the model has %d" % (source, len(given), len(layout)))
    with torch.no_grad():
        for i, ((name, p, transposed), (theirs, t)) in enumerate(zip(layout, given)):
            t = t.t() if transposed else t
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError("%s: tensor %d (%s) has shape %s; the model's %s is %s"
                                 % (source, i, theirs, list(t.shape), name, list(p.shape)))
            p.copy_(t)


def burn_weights(model):
    """The model's parameters as (name, tensor) in Burn's order, names and layout."""
    return [(name, p.t() if transposed else p) for name, p, transposed in model.names]


def verify(path):
    wall0 = time.perf_counter()
    req = read_request(path, "verify request", "kiln_verify", VERIFY_VERSION)
    contract.check(req, "verify_request", path)
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
        torch.manual_seed(req["seed"])
        model = Net(req["model"])
        for m in model.modules():
            if isinstance(m, (nn.Dropout, nn.Dropout2d)):
                m.p = 0.0
                record["notes"].append("dropout off (probability 0)")
        if not req.get("weights_in"):  # this run is the reference: its initial weights go out
            write_weights(req["init_out"], burn_weights(model))
        load_weights(model, req.get("weights_in") or req["init_out"])
        model = model.to(device=device, dtype=weights_dtype(req["precision"]))
        x, y = x[:steps * batch].to(device), y[:steps * batch].to(device)
        cell = Cell(step_args(req, batch), device, model, x, y, x, y)
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
