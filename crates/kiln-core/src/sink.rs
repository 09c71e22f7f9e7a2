//! What a running cell reports: its events, in order, to a sink (the runner prints them as
//! JSON lines), the first of them its `Start`.

use kiln_contract::{Event, Start};
use kiln_data::Dataset;

use crate::protocol::Protocol;

/// Receives the events of a running cell (the runner prints them as JSON lines).
pub trait Sink {
    /// Called for each event, in order.
    fn event(&mut self, event: &Event);
}

impl<F: FnMut(&Event)> Sink for F {
    fn event(&mut self, event: &Event) {
        self(event)
    }
}

/// The `Start` event of a cell.
pub fn start_event(
    model: &str,
    identity: (&str, &str, &str, &str),
    dataset: &Dataset,
    (train_samples, test_samples, steps_per_epoch): (usize, usize, usize),
    protocol: &Protocol,
) -> Event {
    let (backend, device, device_name, precision) = identity;
    Event::Start(Start {
        model: model.into(),
        backend: backend.into(),
        device: device.into(),
        device_name: device_name.into(),
        precision: precision.into(),
        dataset: dataset.name.clone(),
        train_samples,
        test_samples,
        steps_per_epoch,
        epochs: protocol.settings.epochs,
        budget_seconds: protocol.settings.budget_seconds,
    })
}
