"""What every part of the reference runner shares: JSON lines out, notes to stderr, a failed
record, reading a request xtask wrote."""

import json
import math
import sys




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



def fail(record, e):
    """Mark `record` failed with the exception's type and message (xtask reads an out-of-memory
    error in it as the result `out of memory`)."""
    record["status"] = "failed"
    record["reason"] = "%s: %s" % (type(e).__name__, e)
    note(record["reason"])



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
