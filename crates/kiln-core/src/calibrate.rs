//! The device's measured matrix-multiply peak: a short large-GEMM calibration, cached per device
//! fingerprint, so that a cell's achieved GFLOP/s can be read as a share of what the device does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use burn::prelude::*;
use burn::tensor::Distribution;
use kiln_contract::Calibration;

use crate::CoreError;

/// Bump when the calibration method changes: older cached values are then ignored.
const METHOD_VERSION: u32 = 2;

fn cache_file() -> Option<PathBuf> {
    kiln_data::manifest::cache_dir().map(|d| d.join("calibration.json"))
}

fn load_cache() -> BTreeMap<String, Calibration> {
    cache_file()
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn store(key: &str, value: &Calibration) {
    let Some(file) = cache_file() else { return };
    let mut cache = load_cache();
    cache.insert(key.to_string(), value.clone());
    if let (Some(dir), Ok(text)) = (file.parent(), serde_json::to_string_pretty(&cache)) {
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::create_dir_all(dir).is_ok() && std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &file);
        }
    }
}

/// Best GFLOP/s and best seconds of `reps` square `n x n` matrix products on `device`, each
/// synced.
fn measure(device: &Device, n: usize, reps: usize) -> Result<(f64, f64), CoreError> {
    let a = Tensor::<2>::random([n, n], Distribution::Uniform(-1.0, 1.0), device);
    let b = Tensor::<2>::random([n, n], Distribution::Uniform(-1.0, 1.0), device);
    let sync = || {
        device
            .sync()
            .map_err(|e| CoreError::Device(format!("sync during calibration: {e}")))
    };
    // Warm-up (kernel selection, allocation).
    let _ = a.clone().matmul(b.clone());
    sync()?;
    let mut fastest = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        let c = a.clone().matmul(b.clone());
        sync()?;
        fastest = fastest.min(t.elapsed().as_secs_f64());
        drop(c);
    }
    Ok((2.0 * (n as f64).powi(3) / fastest / 1e9, fastest))
}

/// The device's GEMM peak, from the cache when `key` (backend, device, threads, precision and
/// the CPU or adapter name) was calibrated before, else measured now: matrices grow from 512
/// until one product takes a tenth of a second (at most 8192), then the best of five products.
pub fn peak(device: &Device, key: &str, recalibrate: bool) -> Result<Calibration, CoreError> {
    let key = format!("v{METHOD_VERSION}|{key}");
    if !recalibrate && let Some(hit) = load_cache().get(&key) {
        return Ok(Calibration {
            cached: true,
            ..hit.clone()
        });
    }
    let device = device.clone().without_autodiff();
    let mut n = 512;
    while n < 8192 && measure(&device, n, 1)?.1 < 0.1 {
        n *= 2;
    }
    let reps = 5;
    let (gflops, _) = measure(&device, n, reps)?;
    let value = Calibration {
        gflops,
        matrix: n,
        reps,
        cached: false,
    };
    store(&key, &value);
    Ok(value)
}
