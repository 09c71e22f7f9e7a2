"""`--infer FILE`: load a weights file and measure inference as kiln-core's infer.rs does
(kiln-contract' InferRequest and InferRecord): the first prediction from process start,
latency percentiles of one-sample and small-batch queries after steady state, throughput at
the largest batch that fits, memory to serve, and the logits of the test samples. The model
runs under `eval()` and `torch.inference_mode()` with the threads torch chose, as a PyTorch
application serves. A query's input is a request prepared before the clock starts, as an
application holds one when it arrives (a contiguous host tensor of the weights' type); the
query uploads it where the device is not the host, predicts, and reads the logits back to the
host in f32 where they are not there already: nothing a plain serving loop would not do."""

import math
import threading
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
# Samples' worth of requests prepared for each batch size (two requests at least), as
# infer.rs's `POOL`.
POOL = 1024
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

    host = device.type == "cpu"

    def requests(batch):
        """Requests of `batch` samples from sample 0 on (wrapping), made before any clock
        starts: POOL samples' worth, and at batch 1 every one of the agreement's samples."""
        count = max(req["samples"], POOL) if batch == 1 else max(POOL // batch, 2)
        return [tx[[(r * batch + k) % n for k in range(batch)]].to(dtype=dtype).contiguous()
                for r in range(count)]

    def query(x):
        """One request uploaded (where the device is not the host), predicted, read back."""
        out = model(x if host else x.to(device))
        if out.dtype != torch.float32:
            out = out.float()
        return out if host else out.cpu()  # the read-back is the sync

    with torch.inference_mode():
        one = requests(1)
        ready, ready_rss = since_start(), current_rss_bytes()
        first = query(one[0])
        record["first_prediction"] = {"ready_seconds": ready, "seconds": since_start(), "caches": None}
        record["notes"].append("first prediction: class %d" % int(first.argmax(1)[0]))
        served = {}
        for batch in req["latency_batches"]:
            pool = one if batch == 1 else requests(batch)

            def run(at, pool=pool, batch=batch):
                out = query(pool[at % len(pool)])
                if batch == 1 and at % len(pool) < req["samples"]:
                    served[at % len(pool)] = out
            s, w = series(req, run)
            record["latency"].append(percentiles(batch, s, w))
        record["concurrent"] = [clients(req, n, query, one) for n in req.get("clients", [])]
        s, w = series(req, lambda at: (one[at % len(one)] if host else one[at % len(one)].to(device)).reshape(1, -1)[:, :1].float().cpu())
        record["overhead"] = percentiles(1, s, w)
        record["throughput"] = throughput(req, requests, query)
        timed = len(served)
        logits = torch.cat([served[i] if i in served else query(one[i]) for i in range(req["samples"])])
        record["notes"].append("agreement: the %d samples' logits from one-sample queries, the path the "
                               "latency is timed on (%d of them the timed queries' own answers)"
                               % (req["samples"], timed))
    save_tensors(req["logits_out"], {"logits": logits})
    record["logits"] = req["logits_out"]
    record["memory"] = {"ready_rss_bytes": ready_rss, "peak_rss_bytes": peak_rss_bytes()}
    record["process_threads"] = thread_count()


def clients(req, n, query, one):
    """One-sample latency with `n` clients at once, as infer.rs's clients.rs: threads sharing
    the model, each sending its next query when its last is answered (torch releases the GIL
    in its kernels), warmed up together in rounds of GROUP queries each until the steady rule
    holds on the rounds' medians (or the cap), then timed from one start for the throughput's
    seconds, at least MIN_QUERIES each."""
    barrier, lock = threading.Barrier(n), threading.Lock()
    state = {"warming": True, "failed": None, "round": [], "medians": [], "timed": [],
             "span": [None, None]}
    started = time.perf_counter()

    def run(at):
        t = time.perf_counter()
        query(one[at % len(one)])
        return time.perf_counter() - t

    def queries(at, more):
        """Queries from request `at`, stepping by n, while `more(done)` holds."""
        out = []
        while more(len(out)) and state["failed"] is None:
            try:
                out.append(run(at))
            except Exception as e:  # every client passes every barrier, failed or not
                with lock:
                    state["failed"] = state["failed"] or e
            at += n
        return out, at

    def client(k):
        with torch.inference_mode():  # thread-local in torch: each client enters it
            at = k
            while True:
                barrier.wait()
                group, at = queries(at, lambda done: done < GROUP)
                with lock:
                    state["round"].extend(group)
                if barrier.wait() == 0:
                    state["medians"].append(median(state["round"]))
                    state["round"] = []
                    state["warming"] = (not steady(req["timing"], state["medians"])
                                        and time.perf_counter() - started < req["warmup_cap_seconds"]
                                        and state["failed"] is None)
                barrier.wait()
                if not state["warming"]:
                    break
            barrier.wait()
            start = time.perf_counter()
            mine, _ = queries(at, lambda done: done < MIN_QUERIES
                              or time.perf_counter() - start < req["throughput_seconds"])
            end = time.perf_counter()
            with lock:
                state["timed"].extend(mine)
                span = state["span"]
                span[0] = start if span[0] is None else min(span[0], start)
                span[1] = end if span[1] is None else max(span[1], end)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if state["failed"] is not None:
        raise RuntimeError("%d clients at once: %s" % (n, state["failed"]))
    medians, (first, last) = state["medians"], state["span"]
    latency = percentiles(1, state["timed"], (len(medians) * n * GROUP, first - started,
                                              steady(req["timing"], medians)))
    return {"clients": n, "queries_per_second": len(state["timed"]) / max(last - first, 1e-300),
            "latency": latency}


def throughput(req, requests, query):
    """Samples per second at the request's batch, halved while the device runs out of memory;
    batches warmed up until the steady rule holds on their times (or the cap), then timed, as
    infer.rs's `throughput`; each batch size's requests made before its clock starts."""
    def timed(x):
        t = time.perf_counter()
        query(x)
        return time.perf_counter() - t

    warm_start, batch, tried = time.perf_counter(), req["throughput_batch"], []
    while True:
        try:
            pool = requests(batch)
            times = [timed(pool[0])]
            break
        except torch.OutOfMemoryError:
            if batch == 1:
                raise
            tried.append("batch %d: out of memory" % batch)
            batch //= 2
    at = 1
    while not steady(req["timing"], times) and time.perf_counter() - warm_start < req["warmup_cap_seconds"]:
        times.append(timed(pool[at % len(pool)]))
        at += 1
    settled, warmup_seconds = steady(req["timing"], times), time.perf_counter() - warm_start
    start, batches = time.perf_counter(), 0
    while batches < 2 or time.perf_counter() - start < req["throughput_seconds"]:
        query(pool[at % len(pool)])
        batches, at = batches + 1, at + 1
    seconds = time.perf_counter() - start
    return {"batch": batch, "batches": batches, "seconds": seconds,
            "samples_per_second": batches * batch / seconds, "tried": tried,
            "warmup_batches": len(times), "warmup_seconds": warmup_seconds, "steady": settled}


T0 = time.perf_counter()
