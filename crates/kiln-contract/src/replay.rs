//! Replaying a device Kiln does not have: a replay profile holds the step times measured on it
//! (the first step, a compile the first time each batch shape is seen, the steady step), and a
//! replayed cell runs Kiln's own loop, planning, watchdogs and records on this CPU with its
//! steps taking those times instead of training. What a replay shows: whether the plan, the
//! steady-state rule, the late-compile rule and the records hold for such a device; what it
//! cannot show: the device's speed, its memory, or whether it learns.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::schema::{Replay, Settling, StepTimes};

use crate::ModelKind;
use crate::schema::Record;
use crate::vocab::{Precision, TrainingLoop};

/// A profile's times for the cells of one model, backend, precision and loop. Keys it does not
/// know are kept out and named ([`ReplayProfile::read`]): a profile written elsewhere may say
/// more.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProfileCell {
    pub model: ModelKind,
    pub backend: String,
    #[serde(default = "f32")]
    pub precision: Precision,
    #[serde(default, rename = "loop")]
    pub training_loop: TrainingLoop,
    #[serde(flatten)]
    pub times: StepTimes,
    /// Where the times come from (a record's run and cell), for the reader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

fn f32() -> Precision {
    Precision::F32
}

/// Step times measured on a device, to replay on this CPU (`cargo xtask gpu-kit --replay`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReplayProfile {
    /// Every time of the profile (and every cap and budget of the replayed plan) is
    /// multiplied by this: 0.1 replays an 8-minute plan in 48 s plus this machine's start-ups.
    pub scale: f64,
    /// The device replayed, as its records name it (`NVIDIA H200`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Devices the replayed machine has: a cell on more is skipped, as it would be there.
    #[serde(default = "one")]
    pub devices: usize,
    /// The times of a cell the profile does not list.
    pub default: StepTimes,
    #[serde(default)]
    pub cells: Vec<ProfileCell>,
    /// The keys of the file this Kiln does not know (`cells[2].note`), read past: `read`
    /// fills it, and the kit names them.
    #[serde(skip)]
    pub ignored: Vec<String>,
}

fn one() -> usize {
    1
}

/// The keys of `given` (a profile's JSON) that `profile`, read from it, does not have.
fn unknown_keys(given: &serde_json::Value, profile: &ReplayProfile) -> Vec<String> {
    use crate::cell::unknown_keys as missing;
    let known = serde_json::to_value(profile).unwrap_or_default();
    let mut out = missing(given, &known, "");
    out.extend(missing(&given["default"], &known["default"], "default."));
    for (i, cell) in given["cells"].as_array().into_iter().flatten().enumerate() {
        out.extend(missing(cell, &known["cells"][i], &format!("cells[{i}].")));
    }
    out
}

impl ReplayProfile {
    /// Read and check a profile; the error names the file and what is wrong.
    pub fn read(path: &Path) -> Result<ReplayProfile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("replay profile {}: cannot read it: {e}", path.display()))?;
        let bad = |e: serde_json::Error| {
            format!(
                "replay profile {}: {e} (the format: docs/gpu.md, \"Replaying a GPU\")",
                path.display()
            )
        };
        let given: serde_json::Value = serde_json::from_str(&text).map_err(bad)?;
        let mut profile: ReplayProfile = serde_json::from_value(given.clone()).map_err(bad)?;
        profile.ignored = unknown_keys(&given, &profile);
        profile
            .check()
            .map_err(|e| format!("replay profile {}: {e}", path.display()))?;
        Ok(profile)
    }

    /// Every rule a profile must satisfy.
    pub fn check(&self) -> Result<(), String> {
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(format!("scale is {}; give a number over 0", self.scale));
        }
        if self.devices == 0 {
            return Err("devices is 0; a replayed machine has at least one".into());
        }
        self.default.check("default")?;
        for c in &self.cells {
            c.times.check(&format!(
                "the cell {} {} {} {}",
                c.model, c.backend, c.precision, c.training_loop
            ))?;
        }
        Ok(())
    }

    /// The unscaled times of `model` on `backend` at `precision` through `training_loop`: the
    /// listed cell's, else the default's (and whether it was listed).
    pub fn times(
        &self,
        model: ModelKind,
        backend: &str,
        precision: Precision,
        training_loop: TrainingLoop,
    ) -> (StepTimes, bool) {
        self.cells
            .iter()
            .find(|c| {
                c.model == model
                    && c.backend == backend
                    && c.precision == precision
                    && c.training_loop == training_loop
            })
            .map_or((self.default, false), |c| (c.times, true))
    }

    /// The replay of one cell whose unscaled times and listing [`ReplayProfile::times`] gave
    /// (`name`: the profile's file name), scaled.
    pub fn replay(&self, name: &str, (times, listed): (StepTimes, bool)) -> Replay {
        Replay {
            profile: name.to_string(),
            device: self.device.clone(),
            scale: self.scale,
            times: times.scaled(self.scale),
            listed,
        }
    }

    /// A profile of what `records` measured (unscaled; `scale` set to `scale`), a cell for
    /// each model, backend, precision and loop with a measured first step and steady step:
    /// - the first step: the slowest measured (a cold cache), whatever the record's status
    ///   (a cell that never settled still measured its first step);
    /// - the steady step: an ok record's epoch time per full batch, else the steps of its
    ///   epochs after the first (a cell read back as not steady still timed them);
    /// - the new-shape compile: what a first whole epoch took beyond its first step and its
    ///   other steps at the steady pace (the slowest);
    /// - evaluation's compile: half the cell's time outside its epochs (start-up included:
    ///   an upper bound; the slowest).
    pub fn from_records(records: &[Record], scale: f64, default: StepTimes) -> ReplayProfile {
        let mut cells: Vec<ProfileCell> = Vec::new();
        for r in records {
            let Some(cell) = profile_cell(r) else {
                continue;
            };
            match cells.iter_mut().find(|c| {
                (c.model, &c.backend, c.precision, c.training_loop)
                    == (
                        cell.model,
                        &cell.backend,
                        cell.precision,
                        cell.training_loop,
                    )
            }) {
                Some(have) => {
                    let (a, b) = (&mut have.times, cell.times);
                    if a.steady_step_s.is_nan() {
                        a.steady_step_s = b.steady_step_s;
                    }
                    a.first_step_s = a.first_step_s.max(b.first_step_s);
                    a.new_shape_s = a.new_shape_s.max(b.new_shape_s);
                    a.eval_new_shape_s = match (a.eval_new_shape_s, b.eval_new_shape_s) {
                        (Some(x), Some(y)) => Some(x.max(y)),
                        (x, y) => x.or(y),
                    };
                }
                None => cells.push(cell),
            }
        }
        cells.retain(|c| c.times.steady_step_s.is_finite());
        ReplayProfile {
            ignored: Vec::new(),
            scale,
            device: records.iter().find_map(|r| r.fingerprint.gpu_name.clone()),
            devices: 1,
            default,
            cells,
        }
    }
}

/// The steady step a record timed (see [`ReplayProfile::from_records`]).
fn steady_step(r: &Record, model: ModelKind) -> Option<f64> {
    if r.status == crate::Status::Ok {
        let epoch = r.epoch_seconds.as_ref()?.median;
        return Some(epoch * r.batch_size as f64 / model.standard_epoch() as f64);
    }
    let later: Vec<_> = r.epochs.iter().filter(|e| e.epoch > 1).collect();
    let steps: usize = later.iter().map(|e| e.steps).sum();
    (steps > 0).then(|| later.iter().map(|e| e.seconds).sum::<f64>() / steps as f64)
}

/// One record's times (see [`ReplayProfile::from_records`]).
fn profile_cell(r: &Record) -> Option<ProfileCell> {
    let model: ModelKind = r.model.parse().ok()?;
    let first = r.first_step_seconds?;
    // NaN until a record of the cell times its steady steps (the cell is dropped without).
    let steady = steady_step(r, model).unwrap_or(f64::NAN);
    let new_shape = r
        .epochs
        .iter()
        .find(|e| e.epoch == 1 && !e.partial)
        .filter(|_| steady.is_finite())
        .map_or(0.0, |e| {
            (e.seconds - first - e.steps.saturating_sub(1) as f64 * steady).max(0.0)
        });
    let epochs: f64 = r.epochs.iter().map(|e| e.seconds).sum();
    let eval_new_shape = ((r.wall_seconds - epochs) / 2.0).max(0.0);
    Some(ProfileCell {
        model,
        backend: r.backend.clone(),
        precision: r.precision.parse().ok()?,
        training_loop: r.training_loop.unwrap_or_default(),
        times: StepTimes {
            first_step_s: first,
            new_shape_s: new_shape,
            steady_step_s: steady,
            eval_new_shape_s: Some(eval_new_shape),
            settling: None,
        },
        source: Some(format!(
            "{} {} {} {}",
            r.model, r.backend, r.precision, r.started_at
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(text: &str) -> Result<ReplayProfile, String> {
        let p: ReplayProfile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        p.check().map(|()| p)
    }

    #[test]
    fn the_issue_format_reads_and_a_listed_cell_overrides_the_default() {
        let p = profile(
            r#"{"scale": 0.1,
                "default": {"first_step_s": 5, "new_shape_s": 2, "steady_step_s": 0.003},
                "cells": [{"model": "mnist-cnn", "backend": "cuda", "precision": "bf16",
                           "loop": "kiln", "first_step_s": 64.6, "new_shape_s": 36.5,
                           "steady_step_s": 0.0021}]}"#,
        )
        .unwrap();
        let times = p.times(
            ModelKind::MnistCnn,
            "cuda",
            Precision::BF16,
            TrainingLoop::Kiln,
        );
        let r = p.replay("h200.json", times);
        assert!(r.listed);
        assert!((r.times.first_step_s - 6.46).abs() < 1e-9);
        assert!((r.times.steady_step_s - 0.00021).abs() < 1e-12);
        let other = p.times(
            ModelKind::ResNet18,
            "cuda",
            Precision::F32,
            TrainingLoop::Kiln,
        );
        let r = p.replay("h200.json", other);
        assert!(!r.listed && (r.times.first_step_s - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_bad_profile_is_refused_naming_the_field() {
        let bad = |text: &str, needle: &str| {
            let e = profile(text).unwrap_err();
            assert!(e.contains(needle), "{e}");
        };
        let default = r#""default": {"first_step_s": 5, "new_shape_s": 2, "steady_step_s": 0.003}"#;
        bad(&format!(r#"{{"scale": 0, {default}}}"#), "scale is 0");
        bad(
            r#"{"scale": 1, "default": {"first_step_s": -1, "new_shape_s": 2, "steady_step_s": 1}}"#,
            "first_step_s is -1",
        );
        bad(
            &format!(
                r#"{{"scale": 1, {default}, "cells": [{{"model": "mnist-cnn", "backend": "cuda", "first_step_s": 1, "new_shape_s": 1, "steady_step_s": 0}}]}}"#
            ),
            "mnist-cnn cuda f32 kiln: steady_step_s must be over 0",
        );
        bad(r#"{"scale": 1}"#, "missing field `default`");
    }

    #[test]
    fn a_profile_written_elsewhere_is_read_past_what_it_adds_and_says_so() {
        // Another writer's A100 profile: a name and notes of its own, a typo'd optional key.
        let dir = std::env::temp_dir().join(format!("kiln-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a100.json");
        std::fs::write(
            &path,
            r#"{"name": "a100-sxm", "scale": 0.2, "device": "NVIDIA A100",
                "default": {"first_step_s": 8, "new_shape_s": 3, "steady_step_s": 0.004,
                            "measured": "by hand"},
                "cells": [{"model": "resnet18", "backend": "cuda", "first_step_s": 40,
                           "new_shape_s": 9, "steady_step_s": 0.012, "eval_new_shape": 2}]}"#,
        )
        .unwrap();
        let p = ReplayProfile::read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            p.ignored,
            ["name", "default.measured", "cells[0].eval_new_shape"]
        );
        let (times, listed) = p.times(
            ModelKind::ResNet18,
            "cuda",
            Precision::F32,
            TrainingLoop::Kiln,
        );
        assert!(listed && times.first_step_s == 40.0 && times.eval_new_shape_s.is_none());
    }
}
