//! Numbers as people read them: bytes, seconds, thousands.

/// Bytes as MiB or GiB.
pub fn human_bytes(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.0} MiB")
    }
}

/// Bytes as KiB, MiB or GiB, whole (cache sizes).
pub fn human_bytes_short(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    }
}

/// A share (a test accuracy) as `82.7%`, or `–` when there is none.
pub fn percent(share: Option<f64>) -> String {
    share.map_or_else(|| "–".into(), |a| format!("{:.1}%", a * 100.0))
}

/// Seconds as `12.3 s`, `4.1 min` or `2.0 h`.
pub fn human_seconds(s: f64) -> String {
    if s >= 7200.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 600.0 {
        format!("{:.1} min", s / 60.0)
    } else if s >= 100.0 {
        format!("{s:.0} s")
    } else if s >= 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.2} s")
    }
}

/// A GEMM peak in GFLOP/s, whole where it is large, with its first digits where it is not (a
/// backend whose GEMM is slow measures 0.010, not "0").
pub fn gflops_text(gflops: f64) -> String {
    match gflops {
        g if g >= 10.0 => format!("{g:.0}"),
        g if g >= 0.1 => format!("{g:.1}"),
        g => format!("{g:.3}"),
    }
}

pub(crate) fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A latency as people read it: `17.2 µs`, `3.41 ms`, `1.20 s`.
pub fn latency_text(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        human_seconds(s)
    }
}
