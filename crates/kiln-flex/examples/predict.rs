//! Serving with one backend crate: load weights (safetensors, the file `cargo xtask infer`
//! trains into its run's weights/) with kiln-flex and predict the class of images on disk
//! (28×28 8-bit grayscale PNG, normalised as the Fashion-MNIST sample the weights were trained
//! on). docs/inference.md shows it run:
//!
//! ```text
//! cargo run --release -p kiln-flex --example predict -- --write-samples DIR 5
//! cargo run --release -p kiln-flex --example predict -- WEIGHTS mlp DIR/*.png
//! ```

use std::path::{Path, PathBuf};

use burn::prelude::*;
use kiln_contract::{DatasetName, ModelKind, Profile};
use kiln_core::{Classifier, Net};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [flag, dir, n] if flag == "--write-samples" => n
            .parse::<usize>()
            .map_err(|e| format!("{n}: not a count: {e}"))
            .and_then(|n| write_samples(Path::new(dir), n)),
        [weights, model, images @ ..] if !images.is_empty() => model
            .parse::<ModelKind>()
            .map_err(|e| e.to_string())
            .and_then(|model| predict(Path::new(weights), model, images)),
        _ => {
            Err("usage: predict WEIGHTS MODEL IMAGE.png... | predict --write-samples DIR N".into())
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// The normalisation the weights were trained with: the Fashion-MNIST sample's.
fn sample() -> Result<kiln_data::Dataset, String> {
    kiln_data::load(&kiln_data::Request {
        name: DatasetName::FashionMnistSample,
        geometry: ModelKind::Mlp.geometry(),
        data_dir: None,
        seed: 0,
        synthetic_sizes: Profile::Quick.synthetic_sizes(ModelKind::Mlp.standard_epoch()),
    })
    .map_err(|e| e.to_string())
}

fn predict(weights: &Path, model: ModelKind, images: &[String]) -> Result<(), String> {
    let data = sample()?;
    let (mean, std) = (data.mean[0], data.std[0]);
    // The weights load onto a training device (the parameters Burn trains), then serve from
    // its inference twin.
    let device = Device::flex();
    let net = Net::new(model, &device.clone().autodiff()).map_err(|e| e.to_string())?;
    let weights = kiln_contract::verify::Weights::read(weights)?;
    let net = kiln_core::verify::load_weights(net.without_dropout(), &weights)
        .map_err(|e| e.to_string())?
        .valid();
    for image in images {
        let pixels = read_png(Path::new(image))?;
        let x: Vec<f32> = pixels
            .iter()
            .map(|&p| (f32::from(p) / 255.0 - mean) / std)
            .collect();
        let logits = net.forward(Tensor::<4>::from_data(
            TensorData::new(x, [1, 1, 28, 28]),
            &device,
        ));
        let class = logits
            .argmax(1)
            .into_data()
            .iter::<i64>()
            .next()
            .unwrap_or(0);
        println!("{image}: class {class}");
    }
    Ok(())
}

/// A 28×28 8-bit grayscale PNG's pixels.
fn read_png(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .map_err(|e| format!("{}: not a PNG: {e}", path.display()))?;
    let info = reader.info();
    if (info.width, info.height, info.color_type, info.bit_depth)
        != (28, 28, png::ColorType::Grayscale, png::BitDepth::Eight)
    {
        return Err(format!(
            "{}: {}×{} {:?} {:?}; the models take 28×28 8-bit grayscale",
            path.display(),
            info.width,
            info.height,
            info.color_type,
            info.bit_depth
        ));
    }
    let mut pixels = vec![0; 28 * 28];
    reader
        .next_frame(&mut pixels)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(pixels)
}

/// The first `n` test images of the sample as PNGs in `dir`, their label in the name.
fn write_samples(dir: &Path, n: usize) -> Result<(), String> {
    let data = sample()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for i in 0..n.min(data.test.len()) {
        let path: PathBuf = dir.join(format!("{i:03}-label{}.png", data.test.labels[i]));
        let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), 28, 28);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::Eight);
        encoder
            .write_header()
            .and_then(|mut w| w.write_image_data(&data.test.pixels[i * 784..(i + 1) * 784]))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}
