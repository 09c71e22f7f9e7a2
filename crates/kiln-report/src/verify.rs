//! `cargo xtask verify`'s comparison of every backend against the reference, with its
//! thresholds and table; the request and record are `kiln_contract::verify`'s, re-exported here.

mod compare;

pub use compare::*;
pub use kiln_contract::verify::*;

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::{DatasetName, ModelKind, Precision, Status};

    fn record(backend: &str, losses: &[f64]) -> VerifyRecord {
        let request = VerifyRequest {
            kiln_verify: VERIFY_VERSION,
            model: ModelKind::MnistCnn,
            backend: backend.into(),
            device: "cpu".into(),
            precision: Precision::F32,
            steps: losses.len(),
            batch: 4,
            seed: 1,
            dataset: DatasetName::Synthetic,
            data_dir: None,
            data_file: None,
            weights_in: None,
            init_out: Some("init".into()),
            final_out: "final".into(),
            fault: None,
            learning_rate: kiln_contract::protocol::LEARNING_RATE,
        };
        let mut r = VerifyRecord::start(&request, "0");
        r.status = Status::Ok;
        r.losses = losses.iter().map(|&l| Some(l)).collect();
        r
    }

    fn weights(values: &[f32]) -> Weights {
        Weights {
            tensors: vec![
                NamedTensor {
                    name: "conv1.weight".into(),
                    shape: vec![values.len()],
                    values: values.to_vec(),
                },
                NamedTensor {
                    name: "fc.bias".into(),
                    shape: vec![1, 2],
                    values: vec![1.0, -1.0],
                },
            ],
        }
    }

    #[test]
    fn weights_survive_the_safetensors_layout_in_order() {
        let mut w = weights(&[0.5, -2.0, 3.25]);
        // More than ten tensors: the order must not follow the names' sorting.
        for i in 0..11 {
            w.tensors.push(NamedTensor {
                name: format!("z{}", 10 - i),
                shape: vec![1],
                values: vec![i as f32],
            });
        }
        let bytes = w.to_bytes().unwrap();
        let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(header % 8, 0);
        assert_eq!(Weights::from_bytes(&bytes).unwrap(), w);
        assert!(Weights::from_bytes(&bytes[..20]).is_err());
    }

    #[test]
    fn step_ranges_cover_every_step_once() {
        assert_eq!(step_ranges(20), vec![(1, 5), (6, 10), (11, 15), (16, 20)]);
        assert_eq!(step_ranges(2), vec![(1, 1), (2, 2)]);
        for steps in 1..40 {
            let r = step_ranges(steps);
            assert_eq!(r[0].0, 1);
            assert_eq!(r.last().unwrap().1, steps);
            assert!(r.windows(2).all(|w| w[0].1 + 1 == w[1].0));
        }
    }

    #[test]
    fn identical_runs_pass_and_a_drift_is_graded_by_the_precision() {
        let reference = record("flex", &[2.3, 2.0, 1.5, 1.0]);
        let w = weights(&[0.5, -2.0, 3.25]);
        let same = compare(
            &reference,
            &w,
            &record("ndarray", &[2.3, 2.0, 1.5, 1.0]),
            Some(&w),
            None,
        );
        assert_eq!(same.verdict, Verdict::Pass, "{}", same.why);
        assert_eq!(same.loss_max, Some(0.0));

        // 0.3% off on the last step: a warning in f32, a pass in bf16.
        let drift = record("tch", &[2.3, 2.0, 1.5, 1.003]);
        let d = compare(&reference, &w, &drift, Some(&w), None);
        assert_eq!(d.verdict, Verdict::Warn, "{}", d.why);
        assert!(d.why.contains("loss off by 0.30%"), "{}", d.why);
        assert_eq!(d.loss_ranges[3].2.map(|v| (v * 1e4).round()), Some(30.0));
        let mut bf16 = drift.clone();
        bf16.precision = Precision::BF16;
        assert_eq!(
            compare(&reference, &w, &bf16, Some(&w), None).verdict,
            Verdict::Pass
        );

        // A wrong tensor fails and is named.
        let wrong = weights(&[0.5, -2.0, -3.25]);
        let d = compare(
            &reference,
            &w,
            &record("fake", &[2.3, 2.0, 1.5, 1.0]),
            Some(&wrong),
            None,
        );
        assert_eq!(d.verdict, Verdict::Deviates);
        assert_eq!(d.weights_worst.as_deref(), Some("conv1.weight"));
        assert!(d.why.contains("conv1.weight"), "{}", d.why);
    }

    #[test]
    fn failures_and_non_finite_losses_deviate_with_their_reason() {
        let reference = record("flex", &[2.3, 2.0]);
        let w = weights(&[1.0]);
        let mut failed = record("wgpu", &[]);
        failed.status = Status::Failed;
        failed.reason = Some("no adapter".into());
        let d = compare(&reference, &w, &failed, None, None);
        assert_eq!(d.verdict, Verdict::Deviates);
        assert!(d.why.contains("no adapter"));

        let mut nan = record("f16", &[2.3, 2.0]);
        nan.losses[1] = None;
        let d = compare(&reference, &w, &nan, Some(&w), None);
        assert_eq!(d.verdict, Verdict::Deviates);
        assert_eq!(d.loss_ranges[1].2, None);
        assert!(
            d.why.contains("from step 2") && d.why.contains("no reference ran"),
            "{}",
            d.why
        );
        let table = table(&reference, &[d]);
        assert!(table.contains("not finite"), "{table}");

        let mut skipped = record("ndarray", &[]);
        skipped.status = Status::Skipped;
        skipped.reason = Some("ndarray cpu does not support f16".into());
        let d = compare(&reference, &w, &skipped, None, None);
        assert_eq!(d.verdict, Verdict::Unsupported);
        assert!(!d.verdict.agrees() && d.why.contains("does not support f16"));
    }

    #[test]
    fn a_row_that_diverges_like_the_reference_in_its_precision_agrees() {
        let reference = record("flex", &[2.3, 2.0, 1.8]);
        let w = weights(&[1.0]);
        let f16 = |backend: &str, from: usize| {
            let mut r = record(backend, &[2.3, 2.0, 1.8]);
            r.precision = Precision::F16;
            for l in &mut r.losses[from - 1..] {
                *l = None;
            }
            r
        };
        // PyTorch in f16 diverges too: the precision diverges, not the backend.
        let torch = f16("pytorch", 3);
        let d = compare(&reference, &w, &f16("flex", 2), Some(&w), Some(&torch));
        assert_eq!(d.verdict, Verdict::DivergesLikeReference, "{}", d.why);
        assert!(d.verdict.agrees());
        assert!(
            d.why.contains("as pytorch cpu f16's from step 3 on"),
            "{}",
            d.why
        );
        // PyTorch stays finite in f16: this backend alone diverges.
        let mut finite = record("pytorch", &[2.3, 2.0, 1.8]);
        finite.precision = Precision::F16;
        let d = compare(&reference, &w, &f16("wgpu", 2), Some(&w), Some(&finite));
        assert_eq!(d.verdict, Verdict::Deviates, "{}", d.why);
        assert!(d.why.contains("stays finite"), "{}", d.why);
        // A twin in another precision is no twin.
        let d = compare(&reference, &w, &f16("wgpu", 2), Some(&w), Some(&reference));
        assert_eq!(d.verdict, Verdict::Deviates, "{}", d.why);
    }

    #[test]
    fn mismatched_weights_are_an_error_naming_the_tensor() {
        let a = weights(&[1.0, 2.0]);
        let b = weights(&[1.0, 2.0, 3.0]);
        let e = weights_deviation(&a, &b).unwrap_err();
        assert!(e.contains("conv1.weight"), "{e}");
    }

    #[test]
    fn percentages_keep_two_significant_digits() {
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(0.5), "50%");
        assert_eq!(percent(0.034), "3.4%");
        assert_eq!(percent(0.000012), "0.0012%");
    }
}
