//! Two matmuls of the MNIST CNN's 512→1024 linear layer at batch 128 on burn-cpu, each shape
//! run twice and timed with its result read back: the first run of a shape includes Burn's
//! autotune of it, the second is the kernel autotune picked.

use std::time::Instant;

use burn::prelude::*;
use burn::tensor::Distribution;

fn main() {
    let device = Device::cpu();
    // (m, k, n, lhs given transposed): the layer's weight gradient and its input gradient.
    for (m, k, n, transposed) in [(1024, 128, 512, false), (512, 1024, 128, true)] {
        for run in 1..=2 {
            let lhs = if transposed {
                Tensor::<2>::random([k, m], Distribution::Default, &device).transpose()
            } else {
                Tensor::<2>::random([m, k], Distribution::Default, &device)
            };
            let rhs = Tensor::<2>::random([k, n], Distribution::Default, &device);
            let started = Instant::now();
            let out = lhs.matmul(rhs).into_data();
            println!(
                "{m}x{k}x{n}{}: run {run}: {:.3} s ({} values)",
                if transposed { ", lhs transposed" } else { "" },
                started.elapsed().as_secs_f64(),
                out.num_elements()
            );
        }
    }
}
