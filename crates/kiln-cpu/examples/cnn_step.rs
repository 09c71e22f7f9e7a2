//! A reproduction for Burn's maintainers: training steps of the article's MNIST CNN (the
//! network Kiln builds from its description, Adam, batch from the command line) on Burn's
//! CubeCL CPU backend, each step's time synced by reading its loss back. On a 2-core AMD EPYC
//! family 25 model 17 the first step of batch 128 did not end within 12 minutes
//! (docs/burn-cpu.md). Build and run, after `cargo xtask setup-cubecl-llvm`:
//!
//! ```text
//! cargo run --release -p kiln-cpu --features cpu --example cnn_step -- 16 3
//! ```
//!
//! (batch 16, 3 steps). Without the `cpu` feature it runs on flex, for comparison.

use std::time::Instant;

use burn::prelude::*;
use kiln_contract::{DatasetName, ModelKind, Profile};
use kiln_core::{DeviceData, Net, Trainer};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let batch = args.next().and_then(Result::ok).unwrap_or(16);
    let steps = args.next().and_then(Result::ok).unwrap_or(3);
    #[cfg(feature = "cpu")]
    let (device, name) = (Device::cpu(), "burn-cpu");
    #[cfg(not(feature = "cpu"))]
    let (device, name) = (Device::flex(), "flex");
    let device = device.autodiff();
    let kind = ModelKind::MnistCnn;
    let data = match kiln_data::load(&kiln_data::Request {
        name: DatasetName::FashionMnistSample,
        geometry: kind.geometry(),
        data_dir: None,
        seed: 1,
        synthetic_sizes: Profile::Quick.synthetic_sizes(kind.standard_epoch()),
    }) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let data = DeviceData::upload(&data, &device, Some(1));
    let model = match Net::new(kind, &device) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let mut trainer = Trainer::new(model, &device, 1e-3);
    println!("{name}: {kind}, batch {batch}, {steps} steps");
    for step in 0..steps {
        let start = (step * batch) as i64;
        let t = Instant::now();
        let indices = Tensor::<1, Int>::arange(start..start + batch as i64, &device);
        let loss = trainer.step(&data, indices);
        let loss: Vec<f32> = loss.into_data().iter::<f32>().collect();
        println!(
            "step {}: {:.3} s, loss {:.4}",
            step + 1,
            t.elapsed().as_secs_f64(),
            loss.first().copied().unwrap_or(f32::NAN)
        );
    }
}
