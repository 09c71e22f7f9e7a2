//! The protocol on tiny inputs: what it measures, projects and reports (never how fast).

use burn::prelude::*;
use kiln_contract::{Event, Measurements, Method, SlowSteps, Summary, TimingRules, summarize};
use kiln_core::Net;
use kiln_core::kiln_loop;
use kiln_core::models::ModelKind;
use kiln_core::{DeviceData, Protocol};
use kiln_data::Geometry;

fn setup(train: usize) -> (Device, DeviceData) {
    let device = Device::flex();
    device.seed(1);
    let device = device.autodiff();
    let data = kiln_data::synthetic(Geometry::MNIST, train, 32, 5);
    let on_device = DeviceData::upload(&data, &device, None);
    (device, on_device)
}

/// The MNIST CNN trained under `protocol`, its events dropped: what was measured, and the
/// summary a record of it reports.
fn train_quietly(
    device: &Device,
    data: &DeviceData,
    protocol: &Protocol,
) -> (Measurements, Summary) {
    let mut sink = |_: &Event| {};
    let m = kiln_loop::train(cnn(device), device, data, protocol, &mut sink).unwrap();
    let s = summarize(
        &m,
        60_000,
        protocol.settings.epochs,
        protocol.settings.budget_seconds,
    );
    (m, s)
}

/// The default protocol with `epochs` epochs of `batch_size` batches, steady after its first
/// two steps whatever their times (tests assert behaviour, never timings: the warm-up rule
/// itself is tested on step times it is given, and with injected slow steps below).
fn protocol(epochs: usize, batch_size: usize) -> Protocol {
    let mut p = Protocol::default();
    p.settings.epochs = epochs;
    p.batch_size = batch_size;
    p.timing = TimingRules::SETTLE_AT_ONCE;
    p
}

/// Rules that tell an injected 1 s step from a small batch's step on the CPU (a window of one
/// step; within 50% of the one before).
fn telling_rules() -> TimingRules {
    TimingRules {
        steady_window: 1,
        steady_tolerance: 0.5,
        steady_spike: 1e9,
        ..TimingRules::KILN
    }
}

#[test]
fn slow_first_steps_are_warm_up_and_never_timed() {
    let (device, data) = setup(128);
    let mut protocol = protocol(2, 16);
    protocol.timing = telling_rules();
    protocol.inject_slow_steps = Some(SlowSteps {
        steps: 3,
        seconds: 1.0,
        from: 1,
    });
    let (m, out) = train_quietly(&device, &data, &protocol);
    let w = m.warmup.clone().expect("a warm-up");
    assert!(w.steady, "{w:?}");
    // Steps 1 and 3 slept: the times settle at step 5 at the earliest.
    assert!(w.steps >= 5, "{w:?}");
    assert!(
        w.seconds >= 2.0,
        "both slow steps are in the warm-up: {w:?}"
    );
    assert!(
        w.step_seconds[0] >= 1.0 && w.step_seconds[2] >= 1.0,
        "{w:?}"
    );
    assert!(m.first_step_seconds.is_some_and(|s| s >= 1.0));
    // No timed chunk holds a slow step (a chunk is one step here: 8 steps an epoch), and the
    // timed epoch began at steady state.
    assert!(!m.chunks.is_empty());
    assert!(
        m.chunks.iter().all(|c| c.steps == 1 && c.seconds < 1.0),
        "{:?}",
        m.chunks
    );
    assert_eq!(w.epoch, 1);
    assert_eq!(out.obtained.method, Method::Measured);
    assert_eq!(
        out.obtained.epochs, 1,
        "epoch 2, the first to begin at steady state"
    );
    assert!(m.epochs[1].seconds < m.epochs[0].seconds);
}

#[test]
fn a_cell_that_never_settles_is_not_steady_and_has_no_time() {
    let (device, data) = setup(512);
    let mut protocol = protocol(3, 16);
    protocol.timing = telling_rules();
    // Every other step sleeps, for ever: the times never settle within the 3 s cap.
    protocol.inject_slow_steps = Some(SlowSteps {
        steps: usize::MAX,
        seconds: 1.0,
        from: 1,
    });
    protocol.settings.warmup_cap_seconds = 3.0;
    let mut etas = Vec::new();
    let mut sink = |e: &Event| {
        if let Event::Progress(p) = e {
            etas.push(p.eta_seconds);
        }
    };
    let m = kiln_loop::train(cnn(&device), &device, &data, &protocol, &mut sink).unwrap();
    let out = summarize(&m, 60_000, 3, protocol.settings.budget_seconds);
    let w = m.warmup.clone().expect("a warm-up");
    assert!(
        !w.steady && w.seconds >= 3.0 && w.cap_seconds == 3.0,
        "{w:?}"
    );
    // Its progress lines came while it warmed up: no ETA from warm-up steps' times.
    assert!(
        !etas.is_empty() && etas.iter().all(Option::is_none),
        "{etas:?}"
    );
    assert!(m.chunks.is_empty(), "nothing is timed before steady state");
    assert_eq!(m.epochs.len(), 1, "the cell stopped at its cap");
    assert!(m.epochs[0].partial);
    assert!(out.epoch_seconds.is_none() && out.images_per_second.is_none());
    assert_eq!(out.obtained.method, Method::None);
    assert!(out.note.is_some_and(|n| n.contains("not steady")));
}

/// A step far beyond the steady step after steady state (a batch shape compiling late) is a
/// late compile: counted with the warm-up, kept out of its chunk and its epoch's time.
#[test]
fn a_slow_step_after_steady_state_is_kept_out_of_the_epoch_time() {
    let (device, data) = setup(128);
    let mut protocol = protocol(3, 16);
    // Step 12 of 24 (epoch 2 of 3, 8 steps each) sleeps 5 s; the times settled at step 2.
    protocol.inject_slow_steps = Some(SlowSteps {
        steps: 12,
        seconds: 5.0,
        from: 12,
    });
    let (m, out) = train_quietly(&device, &data, &protocol);
    let w = m.warmup.clone().expect("a warm-up");
    assert!(w.steady && w.steps == 2, "{w:?}");
    assert_eq!(w.late_compiles, 1, "{w:?}");
    let late = w.late_compile_steps[0];
    assert_eq!((late.step, late.epoch), (12, 2), "{late:?}");
    assert!(late.seconds >= 5.0 && late.excess_seconds > 4.0, "{late:?}");
    assert!(w.total_seconds() >= w.seconds + 4.0);
    // Neither the chunk nor the epoch it fell in holds it: each is shorter than its excess
    // alone (a bound that holds on a loaded machine too, where 7 steps have taken 3.5 s).
    let excess = late.excess_seconds;
    assert!(
        m.chunks.iter().all(|c| c.seconds < excess),
        "{:?}",
        m.chunks
    );
    assert!(m.epochs[1].seconds < excess, "{:?}", m.epochs[1]);
    assert_eq!(out.obtained.method, Method::Measured);
    assert!(
        out.epoch_seconds
            .is_some_and(|e| e.max < excess * 60_000.0 / 128.0)
    );
}

#[test]
fn whole_epochs_after_warm_up_are_measured() {
    let (device, data) = setup(96);
    let protocol = protocol(3, 32);
    let mut events = Vec::new();
    let mut sink = |e: &Event| events.push(e.clone());
    let m = kiln_loop::train(cnn(&device), &device, &data, &protocol, &mut sink).unwrap();
    let out = summarize(&m, 60_000, protocol.settings.epochs, None);
    assert!(m.diverged.is_none());
    assert_eq!(out.obtained.method, Method::Measured);
    assert_eq!(
        out.obtained.epochs, 2,
        "epochs 2 and 3; the first holds the warm-up"
    );
    assert_eq!(out.obtained.steps, 6);
    assert_eq!(m.epochs.len(), 3);
    assert!(out.first_epoch_seconds.is_some() && m.first_step_seconds.is_some());
    let stats = out.epoch_seconds.unwrap();
    assert_eq!(stats.n, 2);
    // Scaled from 96-sample epochs to the 60,000-sample standard.
    let raw = m.epochs[1].seconds.min(m.epochs[2].seconds);
    assert!((stats.min - raw * 60_000.0 / 96.0).abs() < 1e-6 * stats.min);
    assert!(out.test_accuracy.is_some_and(|a| (0.0..=1.0).contains(&a)));
    assert_eq!(m.test_samples, 32);
    // Every chunk follows the two warm-up steps: 9 steps in 3 epochs of 3.
    assert_eq!(
        m.warmup.as_ref().map(|w| (w.steady, w.steps)),
        Some((true, 2))
    );
    assert_eq!(m.chunks.iter().map(|c| c.steps).sum::<usize>(), 7);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::Epoch(_)))
            .count(),
        3
    );
}

#[test]
fn a_cell_cut_by_its_budget_is_projected() {
    let (device, data) = setup(320);
    let mut protocol = protocol(5, 16);
    protocol.settings.budget_seconds = Some(0.001);
    protocol.timing.min_timed_steps = 3;
    let (m, out) = train_quietly(&device, &data, &protocol);
    assert_eq!(out.obtained.method, Method::Projected);
    assert!(out.obtained.budget_exhausted);
    assert_eq!(
        out.obtained.steps, 3,
        "stops as soon as the minimum is timed"
    );
    assert_eq!(m.epochs.len(), 1);
    assert!(m.epochs[0].partial);
    assert!(
        out.first_epoch_seconds.is_none(),
        "the first epoch never finished"
    );
    assert!(out.epoch_seconds.is_some());
}

#[test]
fn loop_overhead_compares_the_same_steps() {
    let (device, data) = setup(128);
    let protocol = protocol(Protocol::default().settings.epochs, 32);
    let o = kiln_loop::loop_overhead(cnn(&device), &device, &data, &protocol, 2, 2).unwrap();
    assert_eq!((o.rounds, o.steps_per_round), (2, 2));
    assert!(o.kiln_step_seconds.median > 0.0 && o.bare_step_seconds.median > 0.0);
}

#[test]
fn a_nan_loss_makes_the_cell_diverged_with_no_time() {
    let (device, data) = setup(128);
    let mut protocol = protocol(3, 32);
    protocol.inject_nan_at_step = Some(6);
    let (m, out) = train_quietly(&device, &data, &protocol);
    let why = m.diverged.clone().expect("diverged");
    assert!(why.contains("NaN") && why.contains("epoch 2"), "{why}");
    assert!(out.epoch_seconds.is_none() && out.images_per_second.is_none());
    assert_eq!(out.obtained.method, Method::None);
    assert_eq!(
        m.epochs.len(),
        2,
        "training stopped in the epoch that diverged"
    );
}

#[test]
fn micro_batches_give_the_full_batch_gradient() {
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::optim::GradientsParams;
    use kiln_core::Trainer;

    struct Collect<'a>(&'a GradientsParams, Vec<Vec<f32>>);
    impl ModuleVisitor for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.0.get::<D>(param.id) {
                self.1.push(g.into_data().iter::<f32>().collect());
            }
        }
    }
    let (device, data) = setup(16);
    // No dropout: the only difference between the two paths is the accumulation.
    let model = cnn(&device).without_dropout();
    let indices = Tensor::<1, Int>::from_data(
        TensorData::new((0..16i64).collect::<Vec<_>>(), [16]),
        &device,
    );
    let grads = |trainer: Trainer<Net>| {
        let (g, loss) = trainer.gradients(&model, &data, indices.clone());
        let mut c = Collect(&g, Vec::new());
        model.visit(&mut c);
        (c.1, loss.into_data().iter::<f32>().next().unwrap())
    };
    let (full, loss_full) = grads(Trainer::new(model.clone(), &device, 1e-3));
    let (micro, loss_micro) =
        grads(Trainer::new(model.clone(), &device, 1e-3).with_accumulation(4));
    assert!(
        (loss_full - loss_micro).abs() <= 1e-5 * loss_full.abs(),
        "{loss_full} vs {loss_micro}"
    );
    assert_eq!(full.len(), 8);
    for (a, b) in full.iter().zip(&micro) {
        let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
        // f32 sums in another order: a few ulps of the largest gradient.
        assert!(
            worst <= 1e-4 * scale + 1e-7,
            "difference {worst} at scale {scale}"
        );
    }
}

fn cnn(device: &Device) -> Net {
    Net::new(ModelKind::MnistCnn, device).unwrap()
}
