//! `cargo xtask explain`: one training step of a model taken apart into its operations. This
//! module holds what every runner and the report share: the operations of each model at the
//! shapes one step runs them ([`sites`], the one list both the Rust runners and the PyTorch
//! reference time), the request and record schema, and the table maths (time per step, share,
//! ratio to PyTorch, the share of the measured step the operations explain, the operations
//! behind each backend's gap to PyTorch).

mod record;
mod sites;

pub use record::*;
pub use sites::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ModelKind, Precision};

    fn timing(s: f64) -> Timing {
        Timing {
            median_seconds: s,
            mean_seconds: None,
            min_seconds: s,
            max_seconds: s,
            runs: 3,
        }
    }

    #[test]
    fn mnist_cnn_sites_follow_the_layers_and_their_shapes() {
        let s = sites(ModelKind::MnistCnn, 128);
        let names: Vec<&str> = s.iter().map(|s| s.layers[0].as_str()).collect();
        assert_eq!(
            names,
            [
                "conv1",
                "pool1",
                "conv2",
                "pool2",
                "dropout",
                "global max pool",
                "fc1",
                "relu",
                "fc2",
                "loss",
                "optimizer"
            ]
        );
        assert_eq!(s[0].input, [128, 1, 28, 28]);
        assert!(!s[0].input_grad, "the images need no gradient");
        assert_eq!(s[0].phases(), [Phase::Forward, Phase::ParamGrad]);
        assert_eq!(s[2].input, [128, 64, 13, 13]);
        assert_eq!(s[2].output(), [128, 512, 11, 11]);
        assert_eq!(s[5].output(), [128, 512]);
        assert_eq!(s[8].output(), [128, 10]);
        assert_eq!(
            s[10].op,
            LayerOp::Adam {
                parameters: 640 + 295_424 + 525_312 + 10_250
            }
        );
    }

    #[test]
    fn resnet18_merges_identical_layers_and_keeps_every_one() {
        let s = sites(ModelKind::ResNet18, 4);
        let layers: usize = s.iter().map(|s| s.layers.len()).sum();
        // conv1 bn1 relu maxpool; 8 blocks of 7 layers, 3 with a 2-layer downsample; avgpool
        // fc loss optimizer.
        assert_eq!(layers, 4 + 8 * 7 + 3 * 2 + 4);
        let stage1_conv = s
            .iter()
            .find(|s| s.layers[0] == "layer1.0.conv1")
            .expect("layer1's first conv");
        assert_eq!(stage1_conv.layers.len(), 4, "{:?}", stage1_conv.layers);
        assert_eq!(stage1_conv.input, [4, 64, 8, 8]);
        let fc = s.iter().find(|s| s.layers[0] == "fc").expect("fc");
        assert_eq!(fc.input, [4, 512]);
        let down = s
            .iter()
            .find(|s| s.layers[0] == "layer2.0.downsample.conv")
            .expect("downsample");
        assert_eq!(down.input, [4, 64, 8, 8]);
        assert_eq!(down.output(), [4, 128, 4, 4]);
        let Some(LayerOp::Adam { parameters }) = s.last().map(|s| s.op) else {
            panic!("the optimizer comes last");
        };
        assert_eq!(
            parameters, 11_181_642,
            "torchvision's resnet18 with 10 classes"
        );
    }

    #[test]
    fn the_mlp_flattens_the_image_into_two_linear_layers() {
        let s = sites(ModelKind::Mlp, 32);
        let names: Vec<&str> = s.iter().map(|s| s.layers[0].as_str()).collect();
        assert_eq!(names, ["fc1", "relu", "fc2", "loss", "optimizer"]);
        assert_eq!(
            s[0].input,
            [32, 784],
            "the image flattened, no op of its own"
        );
        assert!(!s[0].input_grad);
        assert_eq!(s[0].output(), [32, 256]);
        assert_eq!(s[2].output(), [32, 10]);
        assert_eq!(
            s[4].op,
            LayerOp::Adam {
                parameters: 784 * 256 + 256 + 256 * 10 + 10
            }
        );
        // Forward 2·(784·256 + 256·10) per sample, training 3 × forward (the convention).
        assert_eq!(
            training_flops_per_sample(ModelKind::Mlp),
            3 * 2 * (784 * 256 + 256 * 10)
        );
    }

    #[test]
    fn flops_follow_the_sites() {
        // The values of the layer-by-layer formula this replaced (219 MFLOP for the CNN, as
        // the design card says).
        assert_eq!(training_flops_per_sample(ModelKind::MnistCnn), 219_649_536);
        assert_eq!(training_flops_per_sample(ModelKind::ResNet18), 222_099_456);
        assert_eq!(
            training_flops_per_sample(ModelKind::ResNet18Gray),
            198_065_664
        );
    }

    #[test]
    fn an_op_that_runs_in_several_layers_counts_each_time() {
        let request = ExplainRequest::new(ModelKind::ResNet18, "flex", "cpu", Precision::F32, 2);
        let site = request
            .sites
            .iter()
            .position(|s| s.layers.len() == 4 && matches!(s.op, LayerOp::Conv2d { .. }))
            .expect("a conv run by 4 layers");
        let mut r = ExplainRecord::start(&request, "test", 2);
        r.ops = vec![OpTiming {
            site,
            phase: Phase::Forward,
            timing: timing(0.5),
        }];
        assert!((r.ops_total() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn requests_refuse_amp_and_other_versions() {
        let mut r = ExplainRequest::new(ModelKind::MnistCnn, "flex", "cpu", Precision::AmpBF16, 8);
        assert!(r.validate().unwrap_err().contains("amp-bf16"));
        r.precision = Precision::F32;
        assert!(r.validate().is_ok());
        r.kiln_explain = 99;
        assert!(r.validate().unwrap_err().contains("version 99"));
    }

    #[test]
    fn a_bad_request_file_is_named_in_the_error() {
        let dir = std::env::temp_dir().join(format!("kiln-explain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let path = dir.join("bad.json");
        std::fs::write(&path, "{\"kiln_explain\": 1}").expect("written");
        let e = ExplainRequest::read(&path).unwrap_err();
        assert!(
            e.contains("bad.json: not an explain request") && e.contains("cargo xtask explain"),
            "{e}"
        );
        let e = ExplainRequest::read(&dir.join("missing.json")).unwrap_err();
        assert!(e.starts_with("cannot read an explain request from"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
