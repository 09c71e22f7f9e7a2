//! `kiln-<backend> --infer FILE`: load a weights file and measure what an application that
//! embeds this backend waits for (kiln-contract's `infer`): the first prediction from process
//! start, one-sample and small-batch query latency after steady state, throughput at the
//! largest batch that fits, the memory serving takes, and the logits of the test samples.
//! Every query is what an application does: its input uploaded from the host, the forward
//! pass, its logits read back (the sync).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use burn::prelude::*;

use kiln_contract::Profile;
use kiln_contract::infer::{
    FirstPrediction, InferRecord, InferRequest, Latency, SeriesWarmup, ServeMemory, Throughput,
    write_logits,
};
use kiln_data::Request;

use crate::device::{Binding, one_shot, open_device};
use crate::models::Net;
use crate::verify::load_weights;
use crate::{BURN_VERSION, CoreError};

mod clients;
mod query;
use query::{query, read_back};

/// Run an inference request on `binding`'s device. A panic inside the backend becomes the
/// reason.
pub fn infer(binding: &dyn Binding, request: &InferRequest) -> InferRecord {
    let started = Instant::now();
    let mut record = InferRecord::start(request, binding.version());
    record.threads = binding.threads();
    let (status, reason) = one_shot(binding, &request.backend, request.validate(), || {
        infer_on_device(binding, request, &mut record)
    });
    record.status = status;
    record.reason = reason;
    record.wall_seconds = started.elapsed().as_secs_f64();
    record
}

/// Seconds since the engine started this process (`spawned_at_unix_us`), else since `fallback`.
fn since_spawn(request: &InferRequest, fallback: Instant) -> f64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    match request.spawned_at_unix_us {
        Some(at) if at <= now => (now - at) as f64 / 1e6,
        _ => fallback.elapsed().as_secs_f64(),
    }
}

/// The samples the queries take, on the host as an application holds them.
struct TestSet {
    images: Vec<f32>,
    labels: Vec<u8>,
    /// Values per sample, and the sample's `[channels, height, width]`.
    size: usize,
    dims: [usize; 3],
}

impl TestSet {
    fn len(&self) -> usize {
        self.labels.len()
    }

    /// Requests of `batch` samples each, from sample 0 on (wrapping), as an application holds
    /// them when they arrive: each its own contiguous host buffer, made before any clock starts
    /// (a query then uploads one, predicts and reads back). [`POOL`] samples' worth of them
    /// (two at least), and at batch 1 never fewer than the test set's first `samples`.
    fn requests(&self, batch: usize, samples: usize) -> Vec<TensorData> {
        let [c, h, w] = self.dims;
        let count = if batch == 1 {
            samples.max(POOL)
        } else {
            (POOL / batch).max(2)
        };
        (0..count)
            .map(|r| {
                let mut values = Vec::with_capacity(batch * self.size);
                for k in 0..batch {
                    let i = (r * batch + k) % self.len();
                    values.extend_from_slice(&self.images[i * self.size..(i + 1) * self.size]);
                }
                TensorData::new(values, [batch, c, h, w])
            })
            .collect()
    }
}

/// Samples' worth of requests prepared for each batch size: a query's input is one of them,
/// taken in turn.
const POOL: usize = 1024;

fn infer_on_device(
    binding: &dyn Binding,
    request: &InferRequest,
    record: &mut InferRecord,
) -> Result<Option<String>, CoreError> {
    let process = Instant::now();
    // CubeCL's caches for this question: keyed apart from the training cells'.
    let caches_key = crate::cubecl::cell_key(
        &format!("{}-infer", request.model),
        &request.backend,
        &request.device,
        &request.precision.to_string(),
        1,
    );
    let caches = binding
        .device(&request.device)
        .ok()
        .and_then(|s| s.runtime)
        .and_then(|rt| rt.autotune_cache)
        .map(|_| crate::cubecl::cache_state_for(&caches_key).to_string());
    let (device, spec, name) =
        match open_device(binding, &request.device, request.precision, request.seed)? {
            Ok(d) => d,
            Err(why) => return Ok(Some(why)),
        };
    if request.precision.is_amp() {
        return Ok(Some(format!(
            "{} is a training precision (mixed precision's loss scaling); inference runs in \
             f32, f16 or bf16",
            request.precision
        )));
    }
    record.device = spec;
    record.device_name = name;
    let kind = request.model;
    let weights =
        kiln_contract::verify::Weights::read(&request.weights).map_err(CoreError::Config)?;
    let model = load_weights(Net::new(kind, &device)?.without_dropout(), &weights)?.valid();
    let device = device.without_autodiff();
    let data_started = Instant::now();
    let inputs = inputs(request)?;
    // Reading the test set is Kiln's work, not an application's: kept out of the first
    // prediction's time.
    let data_seconds = data_started.elapsed().as_secs_f64();
    record.notes.push(format!(
        "Burn {BURN_VERSION}; {} test samples of {}; weights {}",
        inputs.len(),
        request.dataset.name(),
        request.weights.display()
    ));
    let ready_seconds = since_spawn(request, process) - data_seconds;
    let ready_rss = kiln_machine::process::current_rss_bytes(None);
    let one = inputs.requests(1, request.samples);
    let first = query(&model, &one[0], &device)?;
    record.first_prediction = Some(FirstPrediction {
        ready_seconds,
        seconds: since_spawn(request, process) - data_seconds,
        caches: caches.clone(),
    });
    record.notes.push(format!(
        "first prediction: class {}",
        kiln_contract::infer::top1(&first, kind.geometry().classes)
            .first()
            .copied()
            .unwrap_or_default()
    ));
    let cap = Duration::from_secs_f64(request.warmup_cap_seconds);
    let served = latencies(request, record, (&model, &inputs, &one), &device)?;
    record.concurrent = clients::concurrent(request, &model, &one, &device)?;
    let overhead = series(request, cap, |at| {
        let x = Tensor::<4>::from_data(one[at % one.len()].clone(), &device);
        read_back(x.reshape([1, inputs.size]).slice([0..1, 0..1])).map(|_| ())
    })?;
    record.overhead = Latency::of(1, &overhead.0, overhead.1);
    record.throughput = Some(throughput(request, cap, &model, &inputs, &device)?);
    let timed = served.iter().filter(|s| s.is_some()).count();
    let logits = logits(&model, &one, served, &device)?;
    record.notes.push(format!(
        "agreement: the {} samples' logits from one-sample queries, the path the latency is \
         timed on ({timed} of them the timed queries' own answers)",
        request.samples
    ));
    write_logits(&request.logits_out, &logits, kind.geometry().classes)
        .map_err(CoreError::Config)?;
    record.logits = Some(request.logits_out.clone());
    record.memory = ready_rss.zip(kiln_machine::process::peak_rss_bytes()).map(
        |(ready_rss_bytes, peak_rss_bytes)| ServeMemory {
            ready_rss_bytes,
            peak_rss_bytes,
        },
    );
    record.process_threads = kiln_machine::process::thread_count();
    if caches.is_some() && !request.cold_caches {
        crate::cubecl::ran(&caches_key);
    }
    Ok(None)
}

/// Each latency series of the request into `record`, its requests prepared before its clock
/// (`one`: the batch-1 requests); returns the logits the batch-1 queries served, by sample,
/// which agreement reads.
fn latencies(
    request: &InferRequest,
    record: &mut InferRecord,
    (model, inputs, one): (&Net, &TestSet, &[TensorData]),
    device: &Device,
) -> Result<Vec<Option<Vec<f32>>>, CoreError> {
    let cap = Duration::from_secs_f64(request.warmup_cap_seconds);
    let mut served: Vec<Option<Vec<f32>>> = vec![None; request.samples];
    for &batch in &request.latency_batches {
        let pool = if batch == 1 {
            one
        } else {
            &inputs.requests(batch, request.samples)
        };
        let series = series(request, cap, |at| {
            let out = query(model, &pool[at % pool.len()], device)?;
            if batch == 1
                && let Some(slot) = served.get_mut(at % pool.len())
            {
                *slot = Some(out);
            }
            Ok(())
        })?;
        record
            .latency
            .extend(Latency::of(batch, &series.0, series.1));
    }
    Ok(served)
}

/// The request's test samples, normalized, on the host.
fn inputs(request: &InferRequest) -> Result<TestSet, CoreError> {
    let geometry = request.model.geometry();
    let dataset = kiln_data::load(&Request {
        name: request.dataset,
        geometry,
        data_dir: request.data_dir.clone(),
        seed: request.seed,
        synthetic_sizes: Profile::Quick.synthetic_sizes(request.model.standard_epoch()),
    })?;
    let test = dataset
        .test
        .clone()
        .truncated(request.samples, dataset.geometry);
    if test.len() < request.samples {
        return Err(CoreError::Config(format!(
            "{} test samples asked; {} has {}",
            request.samples,
            dataset.name,
            test.len()
        )));
    }
    let g = dataset.geometry;
    Ok(TestSet {
        images: dataset.normalized(&test),
        labels: test.labels.clone(),
        size: g.channels * g.height * g.width,
        dims: [g.channels, g.height, g.width],
    })
}

/// A latency series of `run(at)` queries: warm-up groups until the steady rule holds on their
/// medians (or the cap), then the request's queries or its seconds' worth; each query's
/// seconds, and the warm-up's (queries, seconds, steady).
fn series(
    request: &InferRequest,
    cap: Duration,
    mut run: impl FnMut(usize) -> Result<(), CoreError>,
) -> Result<(Vec<f64>, SeriesWarmup), CoreError> {
    let mut timed = |at: usize| -> Result<f64, CoreError> {
        let t = Instant::now();
        run(at)?;
        Ok(t.elapsed().as_secs_f64())
    };
    let warm_start = Instant::now();
    let (mut medians, mut at, mut steady) = (Vec::new(), 0, false);
    while !steady && warm_start.elapsed() < cap {
        let mut group = Vec::with_capacity(InferRequest::GROUP);
        for _ in 0..InferRequest::GROUP {
            group.push(timed(at)?);
            at += 1;
        }
        medians.push(kiln_contract::stats::median(&group).unwrap_or(f64::NAN));
        steady = request.timing.is_steady(&medians);
    }
    let warmup = (at, warm_start.elapsed().as_secs_f64(), steady);
    let start = Instant::now();
    let limit = Duration::from_secs_f64(request.series_seconds);
    let mut seconds = Vec::with_capacity(request.queries);
    while seconds.len() < request.queries
        && (seconds.len() < InferRequest::MIN_QUERIES || start.elapsed() < limit)
    {
        seconds.push(timed(at)?);
        at += 1;
    }
    Ok((seconds, warmup))
}

/// Samples per second at the request's batch, halved while the device runs out of memory;
/// batches are warmed up until the steady rule holds on their times (or `cap`), then timed.
fn throughput(
    request: &InferRequest,
    cap: Duration,
    model: &Net,
    inputs: &TestSet,
    device: &Device,
) -> Result<Throughput, CoreError> {
    let timed = |request: &TensorData| -> Result<f64, CoreError> {
        let t = Instant::now();
        query(model, request, device)?;
        Ok(t.elapsed().as_secs_f64())
    };
    let warm_start = Instant::now();
    // Each batch size's requests made before its clock starts.
    let (batch, tried, first) = largest_batch(request.throughput_batch, |batch| {
        timed(&inputs.requests(batch, 0)[0])
    })?;
    let pool = inputs.requests(batch, 0);
    let mut times = vec![first];
    let mut at = 1;
    while !request.timing.is_steady(&times) && warm_start.elapsed() < cap {
        times.push(timed(&pool[at % pool.len()])?);
        at += 1;
    }
    let steady = request.timing.is_steady(&times);
    let warmup_seconds = warm_start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut batches = 0;
    while batches < 2 || start.elapsed().as_secs_f64() < request.throughput_seconds {
        query(model, &pool[at % pool.len()], device)?;
        (batches, at) = (batches + 1, at + 1);
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(Throughput {
        batch,
        batches,
        seconds,
        samples_per_second: (batches * batch) as f64 / seconds,
        tried,
        warmup_batches: Some(times.len()),
        warmup_seconds: Some(warmup_seconds),
        steady: Some(steady),
    })
}

/// The largest batch from `batch` down, halving, that `run` gets through without running out of
/// memory: that batch, the larger ones given up and why, and what `run` returned for it.
fn largest_batch(
    mut batch: usize,
    mut run: impl FnMut(usize) -> Result<f64, CoreError>,
) -> Result<(usize, Vec<String>, f64), CoreError> {
    let mut tried = Vec::new();
    loop {
        let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(batch)));
        let why = match attempt {
            Ok(Ok(value)) => return Ok((batch, tried, value)),
            Ok(Err(e)) => e.to_string(),
            Err(panic) => crate::device::panic_text(panic.as_ref()),
        };
        if batch == 1 || !kiln_contract::says_out_of_memory(&why) {
            return Err(CoreError::Device(format!("batch {batch}: {why}")));
        }
        tried.push(format!("batch {batch}: out of memory"));
        batch /= 2;
    }
}

/// The logits of the first test samples, one per `served` slot: the timed batch-1 queries'
/// own answers where they served the sample, else a one-sample query on the same path (`one`:
/// the batch-1 requests, sample by sample).
fn logits(
    model: &Net,
    one: &[TensorData],
    served: Vec<Option<Vec<f32>>>,
    device: &Device,
) -> Result<Vec<f32>, CoreError> {
    let mut out = Vec::new();
    for (i, kept) in served.into_iter().enumerate() {
        match kept {
            Some(values) => out.extend(values),
            None => out.extend(query(model, &one[i], device)?),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throughput_batch_halves_past_out_of_memory_and_stops_at_any_other_error() {
        let oom_above_64 = |b: usize| {
            if b > 64 {
                Err(CoreError::Device("CUDA out of memory".into()))
            } else {
                Ok(b as f64)
            }
        };
        let (batch, tried, value) = largest_batch(256, oom_above_64).unwrap();
        assert_eq!((batch, value), (64, 64.0));
        assert_eq!(
            tried,
            ["batch 256: out of memory", "batch 128: out of memory"]
        );
        let wrong =
            |_: usize| -> Result<f64, CoreError> { Err(CoreError::Device("bad shape".into())) };
        let why = largest_batch(256, wrong).unwrap_err().to_string();
        assert!(
            why.contains("batch 256") && why.contains("bad shape"),
            "{why}"
        );
        let panics = |_: usize| -> Result<f64, CoreError> { panic!("out of memory in a kernel") };
        let why = largest_batch(2, panics).unwrap_err().to_string();
        assert!(why.contains("batch 1"), "{why}");
    }
}
