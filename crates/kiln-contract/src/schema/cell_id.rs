//! A cell's coordinates in the matrix, and the file name they give it.

use serde::{Deserialize, Serialize};

use crate::ModelKind;
use crate::vocab::{Precision, TrainingLoop};

/// The coordinates of one cell of the matrix: model × backend × device × precision × batch.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CellId {
    pub model: String,
    pub backend: String,
    pub device: String,
    pub precision: String,
    /// Samples per optimizer step; 0 in a run file written before batch size was a dimension
    /// (`--resume` gives such cells their run's one batch size).
    #[serde(default)]
    pub batch_size: usize,
    /// The training loop when it is not Kiln's own (`--loop learner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_loop: Option<TrainingLoop>,
}

impl CellId {
    /// The coordinates of `model` on `backend`'s `device` in `precision` at `batch_size`.
    pub fn new(
        model: ModelKind,
        backend: &str,
        device: &str,
        precision: Precision,
        batch_size: usize,
    ) -> CellId {
        CellId {
            model: model.to_string(),
            backend: backend.to_string(),
            device: device.to_string(),
            precision: precision.to_string(),
            batch_size,
            training_loop: None,
        }
    }

    /// A file name for the cell (its log, its request, a verify row's weights).
    pub fn stem(&self) -> String {
        let stem = format!(
            "{}-{}-{}-{}-b{}",
            self.model,
            self.backend,
            self.device.replace([':', '/', '#'], "_").replace(',', "+"),
            self.precision,
            self.batch_size
        );
        match self.training_loop {
            Some(l) => format!("{stem}-{l}"),
            None => stem,
        }
    }

    /// The same cell trained through `training_loop`.
    pub fn with_loop(mut self, training_loop: TrainingLoop) -> CellId {
        self.training_loop = training_loop.id_part();
        self
    }
}

impl std::fmt::Display for CellId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on {} {} ({}, batch {}{})",
            self.model,
            self.backend,
            self.device,
            self.precision,
            self.batch_size,
            match self.training_loop {
                Some(l) => format!(", {l} loop"),
                None => String::new(),
            }
        )
    }
}
