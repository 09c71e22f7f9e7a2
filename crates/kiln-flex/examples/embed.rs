//! Kiln from your own program: benchmark the article's MNIST CNN on Burn's flex backend with
//! one request and read the record. `cargo run --release -p kiln-flex --example embed`
//! (about a minute on 2 cores: 1,024 images of the embedded Fashion-MNIST sample, 2 epochs).

use kiln_contract::{Event, Profile, Status};
use kiln_core::{CellRequest, ModelKind};

fn main() {
    let mut request = CellRequest::new(ModelKind::MnistCnn, "flex", Profile::Quick);
    request.settings.epochs = 2;
    request.settings.train_limit = Some(1_024);
    request.settings.eval_limit = Some(512);
    let record = kiln_core::train_cell(&kiln_flex::FlexBinding, &request, &mut |event| {
        if let Event::Epoch(e) = event {
            println!(
                "epoch {}: {:.1} s, loss {:.3}",
                e.epoch, e.seconds, e.mean_loss
            );
        }
    });
    match (record.status, &record.epoch_seconds) {
        (Status::Ok, Some(epoch)) => println!(
            "{} on {} ({}): {:.0} s per {}-sample epoch, test accuracy {:.1}%",
            record.model,
            record.device_name,
            record.precision,
            epoch.median,
            record.obtained.standard_epoch_samples,
            record.test_accuracy.unwrap_or(0.0) * 100.0
        ),
        (status, _) => {
            eprintln!("{}: {}", status.as_str(), record.reason.unwrap_or_default());
            std::process::exit(1);
        }
    }
}
