"""`--infer FILE`: load a weights file and measure inference as kiln-core's infer.rs does
(kiln-contract' InferRequest and InferRecord): the first prediction from process start,
latency percentiles of one-sample and small-batch queries after steady state, throughput at
the largest batch that fits, memory to serve, and the logits of the test samples. The model
runs under `eval()` and `torch.inference_mode()` with the threads torch chose, as a PyTorch
application serves; every query uploads its input from the host and reads its logits back."""

import math
import time

import torch

from common import fail, read_request
import contract
from models import Net
from machine import current_rss_bytes, open_device, peak_rss_bytes, thread_count
from cell import load_data, weights_dtype
from verify import load_weights, save_tensors
from warmup import median, percentiles, process_age_seconds, steady

INFER_VERSION = 1
MIN_QUERIES = 20
GROUP = 10


def series(req, run):
    """Warm-up groups until the steady rule holds on their medians (or the cap), then the
    request's queries or its seconds' worth, as infer.rs's `series`."""
    def timed(at):
        t = time.perf_counter()
        run(at)
        return time.perf_counter() - t
    start, medians, at, settled = time.perf_counter(), [], 0, False
    while not settled and time.perf_counter() - start < req["warmup_cap_seconds"]:
        medians.append(median([timed(at + k) for k in range(GROUP)]))
        at += GROUP
        settled = steady(req["timing"], medians)
    warmup = (at, time.perf_counter() - start, settled)
    start, out = time.perf_counter(), []
    while len(out) < req["queries"] and (len(out) < MIN_QUERIES or time.perf_counter() - start < req["series_seconds"]):
        out.append(timed(at))
        at += 1
    return out, warmup


def infer(path):
    wall0 = time.perf_counter()
    req = read_request(path, "inference request", "kiln_infer", INFER_VERSION)
    contract.check(req, "infer_request", path)
    spec = "cpu" if req["device"] == "default" else req["device"]
    record = {"kiln_infer": INFER_VERSION, "model": req["model"], "backend": "pytorch",
              "backend_version": "torch " + torch.__version__, "device": spec, "device_name": spec,
              "precision": req["precision"], "threads": torch.get_num_threads(), "status": "failed",
              "reason": None, "first_prediction": None, "latency": [], "throughput": None,
              "overhead": None, "memory": None, "logits": None, "samples": req["samples"],
              "notes": [], "wall_seconds": 0.0, "fingerprint": None}
    try:
        if req["precision"].startswith("amp"):
            record.update(status="skipped", reason="%s is a training precision (mixed precision's loss "
                          "scaling); inference runs in f32, f16 or bf16" % req["precision"])
            return record
        device = open_device(record, spec, req["precision"], amp=False)
        if device is None:
            return record
        if not req.get("data_file"):
            raise ValueError("%s: no data_file; cargo xtask infer exports the data" % path)
        data_started = time.perf_counter()
        header, _, _, tx, ty = load_data(req["data_file"], None, req["samples"])
        # Reading the test set is Kiln's work, not an application's: kept out of the first
        # prediction's time, as infer.rs does.
        data_seconds = time.perf_counter() - data_started
        if tx.shape[0] < req["samples"]:
            raise ValueError("%d test samples asked; %s has %d" % (req["samples"], header["name"], tx.shape[0]))
        model = Net(req["model"])
        load_weights(model, req["weights"])
        model = model.to(device=device, dtype=weights_dtype(req["precision"])).eval()
        dtype = weights_dtype(req["precision"])
        record["notes"].append("%d test samples of %s; weights %s; eval() and inference_mode()"
                               % (tx.shape[0], header["name"], req["weights"]))
        measure(req, record, model, tx, (device, dtype), data_seconds)
        record["status"] = "ok"
    except Exception as e:  # one failed record instead of a traceback-only crash
        fail(record, e)
    record["wall_seconds"] = time.perf_counter() - wall0
    return record


def measure(req, record, model, tx, on, data_seconds):
    """Every figure of the record, as infer.rs's `infer_on_device` measures them; `on` is the
    device and the type the inputs take there."""
    device, dtype = on
    n = tx.shape[0]
    spawned = req.get("spawned_at_unix_us")

    def since_start():
        """Seconds since the engine started this process, as infer.rs counts them."""
        if spawned is not None and time.time() * 1e6 >= spawned:
            age = (time.time() * 1e6 - spawned) / 1e6
        else:
            age = process_age_seconds() or (time.perf_counter() - T0)
        return age - data_seconds

    def query(at, batch):
        idx = [(at + k) % n for k in range(batch)]
        x = tx[idx].to(device=device, dtype=dtype)
        out = model(x).float().cpu()  # the read-back is the sync
        return out

    with torch.inference_mode():
        ready, ready_rss = since_start(), current_rss_bytes()
        first = query(0, 1)
        record["first_prediction"] = {"ready_seconds": ready, "seconds": since_start(), "caches": None}
        record["notes"].append("first prediction: class %d" % int(first.argmax(1)[0]))
        for batch in req["latency_batches"]:
            s, w = series(req, lambda at, b=batch: query(at, b))
            record["latency"].append(percentiles(batch, s, w))
        s, w = series(req, lambda at: tx[at % n:at % n + 1].to(device=device, dtype=dtype).reshape(1, -1)[:, :1].float().cpu())
        record["overhead"] = percentiles(1, s, w)
        record["throughput"] = throughput(req, query, device)
        logits = torch.cat([query(at, min(100, req["samples"] - at)) for at in range(0, req["samples"], 100)])
    save_tensors(req["logits_out"], {"logits": logits})
    record["logits"] = req["logits_out"]
    record["memory"] = {"ready_rss_bytes": ready_rss, "peak_rss_bytes": peak_rss_bytes()}
    record["process_threads"] = thread_count()


def throughput(req, query, device):
    """Samples per second at the request's batch, halved while the device runs out of memory;
    batches warmed up until the steady rule holds on their times (or the cap), then timed, as
    infer.rs's `throughput`."""
    def timed(at, batch):
        t = time.perf_counter()
        query(at, batch)
        return time.perf_counter() - t

    warm_start, batch, tried = time.perf_counter(), req["throughput_batch"], []
    while True:
        try:
            times = [timed(0, batch)]
            break
        except torch.OutOfMemoryError:
            if batch == 1:
                raise
            tried.append("batch %d: out of memory" % batch)
            batch //= 2
    at = batch
    while not steady(req["timing"], times) and time.perf_counter() - warm_start < req["warmup_cap_seconds"]:
        times.append(timed(at, batch))
        at += batch
    settled, warmup_seconds = steady(req["timing"], times), time.perf_counter() - warm_start
    start, batches = time.perf_counter(), 0
    while batches < 2 or time.perf_counter() - start < req["throughput_seconds"]:
        query(at, batch)
        batches, at = batches + 1, at + batch
    seconds = time.perf_counter() - start
    return {"batch": batch, "batches": batches, "seconds": seconds,
            "samples_per_second": batches * batch / seconds, "tried": tried,
            "warmup_batches": len(times), "warmup_seconds": warmup_seconds, "steady": settled}


T0 = time.perf_counter()
