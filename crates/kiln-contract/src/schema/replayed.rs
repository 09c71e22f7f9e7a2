//! What a replayed cell carries (`gpu-kit --replay`): the step times it followed, in its
//! request and its record. The profiles they come from are `crate::replay`'s.

use serde::{Deserialize, Serialize};

/// One cell's step times on the replayed device, in seconds. (No `deny_unknown_fields`: a
/// profile's cell flattens it beside keys of its own and of other writers.)
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StepTimes {
    /// The process's first training step: compilation, autotune, caches.
    pub first_step_s: f64,
    /// What a training step of a batch shape not seen before adds (its kernels compile).
    pub new_shape_s: f64,
    /// A steady training step of a full batch (a smaller batch takes its share).
    pub steady_step_s: f64,
    /// What an evaluation batch of a shape not seen before adds; `new_shape_s` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_new_shape_s: Option<f64>,
    /// Steps after the first that still compile (the H200's CNN took 1.85 s a step for its
    /// second and third steps); none when every step after the first is steady.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settling: Option<Settling>,
}

/// The steps after the first that still compile: how many, and what each takes in all.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Settling {
    pub steps: u32,
    pub step_s: f64,
}

impl StepTimes {
    /// Every time multiplied by `scale`.
    pub fn scaled(&self, scale: f64) -> StepTimes {
        StepTimes {
            first_step_s: self.first_step_s * scale,
            new_shape_s: self.new_shape_s * scale,
            steady_step_s: self.steady_step_s * scale,
            eval_new_shape_s: self.eval_new_shape_s.map(|s| s * scale),
            settling: self.settling.map(|s| Settling {
                steps: s.steps,
                step_s: s.step_s * scale,
            }),
        }
    }

    /// The seconds the steps after the first spend before they are steady: the settling
    /// steps' time beyond a steady step's.
    pub fn settling_s(&self) -> f64 {
        self.settling.map_or(0.0, |s| {
            s.steps as f64 * (s.step_s - self.steady_step_s).max(0.0)
        })
    }

    /// The compile an evaluation batch of a new shape adds.
    pub fn eval_compile_s(&self) -> f64 {
        self.eval_new_shape_s.unwrap_or(self.new_shape_s)
    }

    /// An error naming the field that is negative or not a number.
    pub(crate) fn check(&self, what: &str) -> Result<(), String> {
        let fields = [
            ("first_step_s", Some(self.first_step_s)),
            ("new_shape_s", Some(self.new_shape_s)),
            ("steady_step_s", Some(self.steady_step_s)),
            ("eval_new_shape_s", self.eval_new_shape_s),
            ("settling.step_s", self.settling.map(|s| s.step_s)),
        ];
        for (name, value) in fields {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(format!("{what}: {name} is {v}; give seconds, 0 or more"));
            }
        }
        if self.steady_step_s <= 0.0 {
            return Err(format!("{what}: steady_step_s must be over 0"));
        }
        Ok(())
    }
}

/// The times a replayed cell follows, already scaled, as its request carries them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Replay {
    /// The profile's file name and device, for the record.
    pub profile: String,
    pub device: Option<String>,
    pub scale: f64,
    /// The cell's times, multiplied by `scale`.
    pub times: StepTimes,
    /// Whether the profile lists this cell (else its `default` times were used).
    pub listed: bool,
}
