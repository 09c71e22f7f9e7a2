//! One-sample latency with several clients at once, as a web service that embeds one backend
//! crate sees it: `n` threads share the loaded model, each sends its next query when its last
//! is answered. They warm up together in rounds (each client [`InferRequest::GROUP`] queries)
//! until the steady rule holds on the rounds' medians (or the warm-up cap), then start their
//! timed queries at once and go on for the throughput's seconds (a load test's fixed stretch:
//! at the MLP's 20 µs a series' 1,000 queries would be 20 ms), at least
//! [`InferRequest::MIN_QUERIES`] each.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use burn::prelude::*;
use kiln_contract::infer::{Concurrent, InferRequest, Latency};

use super::query::query;
use crate::CoreError;
use crate::models::Net;

/// The request's client counts, each measured on its own (`one`: the batch-1 requests,
/// prepared before any clock).
pub(super) fn concurrent(
    request: &InferRequest,
    model: &Net,
    one: &[TensorData],
    device: &Device,
) -> Result<Vec<Concurrent>, CoreError> {
    request
        .clients
        .iter()
        .map(|&n| clients(request, n, model, one, device))
        .collect()
}

/// What the clients of one measure share: the barrier of their rounds, the leader's decision
/// to warm up on, the first failure, and the seconds of the queries.
struct ClientState {
    barrier: Barrier,
    warming: AtomicBool,
    failed: Mutex<Option<String>>,
    round: Mutex<Vec<f64>>,
    medians: Mutex<Vec<f64>>,
    timed: Mutex<Vec<f64>>,
    /// When the timed queries started, and when each client ended them.
    span: Mutex<(Option<Instant>, Option<Instant>)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ClientState {
    fn failed(&self) -> bool {
        lock(&self.failed).is_some()
    }

    fn fail(&self, why: String) {
        lock(&self.failed).get_or_insert(why);
    }

    /// The leader's look after a warm-up round: its median joins the others; warm-up goes on
    /// while the rule is not met, the cap not reached and no client failed.
    fn decide(&self, request: &InferRequest, started: Instant, cap: Duration) {
        let round = std::mem::take(&mut *lock(&self.round));
        let mut medians = lock(&self.medians);
        medians.push(kiln_contract::stats::median(&round).unwrap_or(f64::NAN));
        let go_on =
            !request.timing.is_steady(&medians) && started.elapsed() < cap && !self.failed();
        self.warming.store(go_on, Ordering::SeqCst);
    }
}

/// One query's seconds, a panic inside the backend an error.
type Timed<'a> = dyn Fn(usize) -> Result<f64, CoreError> + Sync + 'a;

/// `n` clients at once.
fn clients(
    request: &InferRequest,
    n: usize,
    model: &Net,
    one: &[TensorData],
    device: &Device,
) -> Result<Concurrent, CoreError> {
    let shared = ClientState {
        barrier: Barrier::new(n),
        warming: AtomicBool::new(true),
        failed: Mutex::new(None),
        round: Mutex::new(Vec::new()),
        medians: Mutex::new(Vec::new()),
        timed: Mutex::new(Vec::new()),
        span: Mutex::new((None, None)),
    };
    let started = Instant::now();
    std::thread::scope(|scope| {
        for k in 0..n {
            let (model, device, shared) = (model.clone(), device.clone(), &shared);
            scope.spawn(move || {
                let run = move |at: usize| -> Result<f64, CoreError> {
                    let t = Instant::now();
                    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        query(&model, &one[at % one.len()], &device)
                    }));
                    match answer {
                        Ok(out) => out.map(|_| t.elapsed().as_secs_f64()),
                        Err(panic) => {
                            Err(CoreError::Device(crate::device::panic_text(panic.as_ref())))
                        }
                    }
                };
                client(k, n, (request, started), shared, &run);
            });
        }
    });
    if let Some(why) = lock(&shared.failed).take() {
        return Err(CoreError::Device(format!("{n} clients at once: {why}")));
    }
    let seconds = std::mem::take(&mut *lock(&shared.timed));
    let medians = lock(&shared.medians).clone();
    let warmup = (
        medians.len() * n * InferRequest::GROUP,
        0.0,
        request.timing.is_steady(&medians),
    );
    let (from, to) = *lock(&shared.span);
    let span = from.zip(to).map_or(0.0, |(a, b)| (b - a).as_secs_f64());
    let mut latency = Latency::of(1, &seconds, warmup)
        .ok_or_else(|| CoreError::Device(format!("{n} clients answered no query")))?;
    latency.warmup_seconds = from.map_or(0.0, |f| (f - started).as_secs_f64());
    Ok(Concurrent {
        clients: n,
        queries_per_second: seconds.len() as f64 / span.max(f64::MIN_POSITIVE),
        latency,
    })
}

/// Client `k` of `n`: the warm-up rounds, then its timed queries. It takes the requests `k`,
/// `k + n`, ... so the clients query different samples; every client passes every barrier,
/// failed or not, so none waits for ever.
fn client(
    k: usize,
    n: usize,
    (request, started): (&InferRequest, Instant),
    s: &ClientState,
    run: &Timed,
) {
    let cap = Duration::from_secs_f64(request.warmup_cap_seconds);
    let mut at = k;
    loop {
        s.barrier.wait();
        let mut group = Vec::with_capacity(InferRequest::GROUP);
        while group.len() < InferRequest::GROUP && !s.failed() {
            match run(at) {
                Ok(t) => group.push(t),
                Err(e) => s.fail(e.to_string()),
            }
            at += n;
        }
        lock(&s.round).extend(group);
        if s.barrier.wait().is_leader() {
            s.decide(request, started, cap);
        }
        s.barrier.wait();
        if !s.warming.load(Ordering::SeqCst) {
            break;
        }
    }
    s.barrier.wait();
    let (start, limit) = (
        Instant::now(),
        Duration::from_secs_f64(request.throughput_seconds),
    );
    let mut mine = Vec::with_capacity(request.queries);
    while !s.failed() && (mine.len() < InferRequest::MIN_QUERIES || start.elapsed() < limit) {
        match run(at) {
            Ok(t) => mine.push(t),
            Err(e) => s.fail(e.to_string()),
        }
        at += n;
    }
    let end = Instant::now();
    lock(&s.timed).extend(mine);
    let mut span = lock(&s.span);
    span.0 = Some(span.0.map_or(start, |f| f.min(start)));
    span.1 = Some(span.1.map_or(end, |e| e.max(end)));
}
