"""`--verify FILE`: train K steps from given weights and write the loss curve and final weights."""

import ctypes
import json
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
    """The safetensors layout kiln-contract reads: names prefixed with their position."""
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
        layout = model.names
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
