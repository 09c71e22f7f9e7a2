#!/usr/bin/env python3
"""Kiln's PyTorch reference runner: the protocol of crates/kiln-core, in plain PyTorch.

Same models layer for layer, same Adam (1e-3, eps 1e-8), same batch, same sample order
(SplitMix64 Fisher-Yates per epoch), same synced timing (first step and first epoch apart,
chunks of a tenth of an epoch, stop when the budget ends), same test evaluation. It reports
what it observed (kiln-contract' Observed, as JSON); xtask derives the record with the rules and
the fingerprint code every Rust runner's records use, so statistics, projection and labels are
never computed twice. `cargo xtask bench-all` starts it with
the torch environment's Python and `--cell FILE`, the same cell request every Rust runner takes,
whose `data_file` holds the exact samples the Rust runners load. Run by hand:
`python pytorch/kiln_torch --probe`.

The package: common.py (JSON lines, requests), contract.py (the request and record checked
against contract.schema.json, generated from the Rust types), models.py (the networks built from the models' descriptions in the contract file; their FLOPs are Rust's), machine.py (devices, memory, GEMM
peak), cell.py (sample order, data, the timed loop), explain.py, verify.py, infer.py; this file reads
the arguments and the cell request."""

import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from common import emit, fail, finite_or_null, note, read_request  # noqa: E402
import contract  # noqa: E402
from models import Net, input_shape, models  # noqa: E402
from machine import gemm_peak, peak_rss_bytes, probe, thread_count  # noqa: E402
from cell import Cell, load_data, train, weights_dtype  # noqa: E402
from explain import explain  # noqa: E402
from verify import verify  # noqa: E402
from infer import infer  # noqa: E402


def observed(args, status, reason):
    """kiln-contract' Observed: the facts of this cell; xtask adds the machine's fingerprint."""
    return {
        "status": status, "reason": reason, "device": args.device, "device_name": args.device,
        "device_kind": None, "runtime": None, "device_memory_bytes": None,
        "backend_version": "torch " + torch.__version__, "threads": torch.get_num_threads(),
        "dataset": "", "data": "synthetic", "notes": [], "flops_per_sample": None, "peak": None,
        "peak_memory_bytes": peak_rss_bytes(), "started_at": int(time.time()), "wall_seconds": 0.0,
        "args": sys.argv[1:], "measurements": None, "loop_overhead": None,
    }




CELL_VERSION = 1


def read_cell(path):
    """The cell request xtask wrote (kiln-contract' CellRequest, validated on the Rust side and
    against the contract's schema here)."""
    cell = read_request(path, "cell request", "kiln_cell", CELL_VERSION)
    contract.check(cell, "cell_request", path)
    if cell.get("model") not in models():
        raise SystemExit("error: %s: this runner has no model %r" % (path, cell.get("model")))
    if not cell.get("data_file"):
        raise SystemExit("error: %s: no data_file; cargo xtask exports the cell's data for this runner" % path)
    if cell.get("training_loop", "kiln") != "kiln" or cell.get("devices"):
        raise SystemExit("error: %s: the PyTorch reference trains its own loop on one device; "
                         "training_loop %r and devices %r are for Burn's runners"
                         % (path, cell.get("training_loop"), cell.get("devices")))
    # Every key of the request (every setting of CellSettings among them) by its own name, so
    # a new setting reaches this runner as it reaches the Rust ones; then the optional keys'
    # defaults.
    args = argparse.Namespace(**cell)
    for key, default in (("calibrate_only", False), ("given_peak", None), ("loss_scaling", None),
                         ("inject_slow_steps", None)):
        setattr(args, key, cell.get(key, default))
    return args


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
    if args.given_peak is not None:
        record["peak"] = args.given_peak
    elif args.calibrate or args.calibrate_only:
        record["peak"] = gemm_peak(device, weights_dtype(args.precision))
        note("GEMM peak %.1f GFLOP/s" % record["peak"]["gflops"])
    if args.calibrate_only:
        record.update(status="ok", reason="GEMM calibration only", wall_seconds=time.perf_counter() - wall0)
        return record
    header, x, y, tx, ty = load_data(args.data_file, args.train_limit, args.eval_limit)
    shape = input_shape(args.model)
    if (header["channels"], header["height"], header["width"]) != shape:
        raise SystemExit("the data file holds %dx%dx%d images; %s takes %dx%dx%d" % (
            header["channels"], header["height"], header["width"], args.model, *shape))
    torch.manual_seed(args.seed)
    model = Net(args.model)
    model = model.to(device=device, dtype=weights_dtype(args.precision))
    x, y, tx, ty = x.to(device), y.to(device), tx.to(device), ty.to(device)
    record.update(dataset=header["name"], data=header["origin"])
    if header.get("note"):
        record["notes"].append(header["note"])
    cell = Cell(args, device, model, x, y, tx, ty)
    emit({"event": "start", "model": args.model, "backend": "pytorch", "device": spec,
          "device_name": d["name"], "precision": args.precision, "dataset": header["name"],
          "train_samples": x.shape[0], "test_samples": tx.shape[0],
          "steps_per_epoch": cell.steps_per_epoch, "epochs": args.epochs, "budget_seconds": args.budget_seconds})
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    measured = train(cell)
    if device.type == "cuda":
        measured["device_memory"] = {"peak_in_use_bytes": torch.cuda.max_memory_allocated(device),
                                     "peak_reserved_bytes": torch.cuda.max_memory_reserved(device)}
    if cell.scaler is not None:
        measured["loss_scaling"] = {"mode": "dynamic", "initial_scale": 65536.0,
                                    "final_scale": cell.scaler.get_scale(),
                                    "skipped_steps": cell.skipped, "applied_steps": cell.applied,
                                    "growth_interval": 2000}
    elif cell.scaling == "none":
        measured["loss_scaling"] = {"mode": "none", "initial_scale": 1.0, "final_scale": 1.0,
                                    "skipped_steps": 0, "applied_steps": cell.applied,
                                    "growth_interval": 0}
    record.update(status="ok", measurements=measured, peak_memory_bytes=peak_rss_bytes(),
                  process_threads=thread_count(), wall_seconds=time.perf_counter() - wall0)
    return record


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--probe", action="store_true", help="print the devices as JSON")
    p.add_argument("--cell", help="the cell request (JSON) that cargo xtask writes")
    p.add_argument("--explain", help="an explain request (JSON) that cargo xtask explain writes")
    p.add_argument("--verify", help="a verify request (JSON) that cargo xtask verify writes")
    p.add_argument("--infer", help="an inference request (JSON) that cargo xtask infer writes")
    cli = p.parse_args()
    threads = int(os.environ.get("RAYON_NUM_THREADS") or 0) or (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    if cli.probe:
        emit({"backend": "pytorch", "backend_version": "torch " + torch.__version__, "devices": probe()})
        return 0
    for flag, answer, message in ((cli.explain, explain, "explain_record"),
                                  (cli.verify, verify, "verify_record"),
                                  (cli.infer, infer, "infer_record")):
        if flag:
            record = finite_or_null(answer(flag))
            contract.check(record, message, "the record this runner made")
            emit(record)
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
    # What Kiln reads must be what the contract says: a misspelt or mistyped field stops here,
    # named, instead of being lost or failing in xtask's reading.
    record = finite_or_null(record)
    contract.check(record, "observed", "the record this runner made")
    emit(dict(event="observed", **record))
    return code


if __name__ == "__main__":
    sys.exit(main())
