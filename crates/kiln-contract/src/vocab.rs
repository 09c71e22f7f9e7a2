//! Kiln's vocabulary: every name a user types or a record holds (precisions, datasets,
//! autotune levels, device kinds, profiles, fallback targets; the models' names are made by the
//! same macro beside their descriptions, in `models/`), defined once. xtask, every Rust runner
//! and (through the JSON they exchange) the PyTorch runner use these and nothing else.

use std::fmt;
use std::str::FromStr;

/// A closed set of names: each value has one spelling, used on the command line, in cell
/// requests and in records.
pub trait Vocabulary: Copy + Eq + 'static {
    /// What the values are called in messages (`model`, `precision`, ...).
    const WHAT: &'static str;
    /// Every value, in the order lists and tables show them.
    const ALL: &'static [Self];
    /// The value's name.
    fn name(self) -> &'static str;

    /// The value called `name`, or an error listing the known ones.
    fn parse(name: &str) -> Result<Self, UnknownName> {
        Self::ALL
            .iter()
            .copied()
            .find(|v| v.name() == name)
            .ok_or_else(|| UnknownName {
                what: Self::WHAT,
                given: name.to_string(),
                known: Self::names(),
            })
    }

    /// Every name, comma-separated (for help texts and errors).
    fn names() -> String {
        Self::ALL
            .iter()
            .map(|v| v.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A name that is not in a [`Vocabulary`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}; known: {known}")]
pub struct UnknownName {
    pub what: &'static str,
    pub given: String,
    pub known: String,
}

/// Define a vocabulary enum: its variants, their names, and string-based serde, `Display` and
/// `FromStr` derived from those names (so the JSON spelling is the command-line spelling).
macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident, $what:literal, {
        $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// The value's name (as typed on the command line and written in JSON).
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl Vocabulary for $name {
            const WHAT: &'static str = $what;
            const ALL: &'static [Self] = &[$($name::$variant,)+];
            fn name(self) -> &'static str {
                $name::name(self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        /// Command lines list the possible values and refuse others with them.
        #[cfg(feature = "clap")]
        impl clap::ValueEnum for $name {
            fn value_variants<'a>() -> &'a [Self] {
                <$name as Vocabulary>::ALL
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.name()))
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                <$name as Vocabulary>::parse(s)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        /// A string among the names (the JSON Schema the Python runner validates against).
        #[cfg(feature = "schema")]
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({"type": "string", "enum": [$($text),+]})
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                <$name as Vocabulary>::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use vocabulary;

/// Image geometry and class count of a model's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Geometry {
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub classes: usize,
}

impl Geometry {
    /// 1x28x28, 10 classes (MNIST, Fashion-MNIST).
    pub const MNIST: Geometry = Geometry {
        channels: 1,
        height: 28,
        width: 28,
        classes: 10,
    };
    /// 3x32x32, 10 classes (CIFAR-10).
    pub const CIFAR: Geometry = Geometry {
        channels: 3,
        height: 32,
        width: 32,
        classes: 10,
    };

    /// Bytes in one image.
    pub fn pixels(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Samples in the standard epoch every time is reported for: the real training set of
    /// this geometry (60,000 for MNIST-shaped data, 50,000 for CIFAR-10).
    pub fn standard_epoch(&self) -> usize {
        if *self == Geometry::CIFAR {
            50_000
        } else {
            60_000
        }
    }
}

vocabulary!(
    /// Float precision of a cell.
    Precision, "precision", {
        /// Everything in f32.
        F32 = "f32",
        /// Pure f16: weights, optimizer state, activations and gradients.
        F16 = "f16",
        /// Pure bf16.
        BF16 = "bf16",
        /// Mixed precision: f32 master weights and optimizer, f16 forward and backward, dynamic
        /// loss scaling.
        AmpF16 = "amp-f16",
        /// Mixed precision with bf16 compute.
        AmpBF16 = "amp-bf16",
    }
);

/// A float type, without naming any framework's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FloatKind {
    F32,
    F16,
    BF16,
}

impl FloatKind {
    /// The short name (`f32`, `f16`, `bf16`), as probes list what a device computes in.
    pub fn name(self) -> &'static str {
        match self {
            FloatKind::F32 => "f32",
            FloatKind::F16 => "f16",
            FloatKind::BF16 => "bf16",
        }
    }
}

impl Precision {
    /// The float type the forward and backward passes compute in.
    pub fn compute(self) -> FloatKind {
        match self {
            Precision::F32 => FloatKind::F32,
            Precision::F16 | Precision::AmpF16 => FloatKind::F16,
            Precision::BF16 | Precision::AmpBF16 => FloatKind::BF16,
        }
    }

    /// The float type the weights live in: f32 for f32 and the mixed-precision modes (f32
    /// master weights), the pure type otherwise.
    pub fn weights(self) -> FloatKind {
        if self.is_amp() {
            FloatKind::F32
        } else {
            self.compute()
        }
    }

    /// True for the mixed-precision modes (f32 master weights, loss scaling).
    pub fn is_amp(self) -> bool {
        matches!(self, Precision::AmpF16 | Precision::AmpBF16)
    }
}

vocabulary!(
    /// The datasets a cell can train on.
    DatasetName, "dataset", {
        /// MNIST digits (60k/10k, IDX).
        Mnist = "mnist",
        /// Fashion-MNIST (MNIST's format and size).
        FashionMnist = "fashion-mnist",
        /// The embedded sample: 8,000 train / 2,000 test images of Fashion-MNIST.
        FashionMnistSample = "fashion-mnist-sample",
        /// CIFAR-10 (binary version).
        Cifar10 = "cifar-10",
        /// Generated images of the model's shape (labelled synthetic in every record).
        Synthetic = "synthetic",
        /// The user's IDX image/label pairs in --data-dir (labelled custom).
        Idx = "idx",
        /// The user's folder of images, one sub-folder per class, in --data-dir (labelled
        /// custom).
        ImageFolder = "image-folder",
    }
);

impl DatasetName {
    /// The geometry of a real dataset (`None` for synthetic data, which takes the model's).
    pub fn geometry(self) -> Option<Geometry> {
        match self {
            DatasetName::Mnist | DatasetName::FashionMnist | DatasetName::FashionMnistSample => {
                Some(Geometry::MNIST)
            }
            DatasetName::Cifar10 => Some(Geometry::CIFAR),
            // Generated or converted to the model's input; a custom IDX file is checked
            // against it when read.
            DatasetName::Synthetic | DatasetName::Idx | DatasetName::ImageFolder => None,
        }
    }

    /// The test accuracy a cell races to by default in the full profile (the time to reach it
    /// is a column of the report); `None` for data with no agreed target (synthetic, the
    /// user's own). Every model on a dataset races to the same line (docs/methodology.md says
    /// where each number comes from).
    pub fn default_target(self) -> Option<f64> {
        match self {
            DatasetName::Mnist => Some(0.98),
            DatasetName::FashionMnist => Some(0.88),
            DatasetName::FashionMnistSample => Some(0.80),
            DatasetName::Cifar10 => Some(0.70),
            DatasetName::Synthetic | DatasetName::Idx | DatasetName::ImageFolder => None,
        }
    }

    /// True when a model taking `input` can train on it.
    pub fn fits(self, input: Geometry) -> bool {
        self.geometry().is_none_or(|g| g == input)
    }
}

vocabulary!(
    /// CubeCL's autotune levels.
    AutotuneLevel, "autotune level", {
        Minimal = "minimal",
        Balanced = "balanced",
        Extensive = "extensive",
        Full = "full",
    }
);

vocabulary!(
    /// Loss scaling of a mixed-precision (`amp-*`) cell (`--loss-scaling`).
    LossScalingMode, "loss scaling", {
        /// Scale the loss, skip steps whose gradients overflow, adapt the scale (f16's need).
        Dynamic = "dynamic",
        /// No scaling (bf16 has f32's exponent range: PyTorch's guidance for bf16).
        None = "none",
    }
);

impl LossScalingMode {
    /// The mode a precision gets unless `--loss-scaling` says otherwise: dynamic for f16,
    /// none for bf16.
    pub fn default_for(precision: Precision) -> LossScalingMode {
        match precision.compute() {
            FloatKind::F16 => LossScalingMode::Dynamic,
            _ => LossScalingMode::None,
        }
    }
}

vocabulary!(
    /// What kind of device a cell runs on.
    DeviceKind, "device kind", {
        /// The host CPU.
        Cpu = "cpu",
        DiscreteGpu = "discrete-gpu",
        IntegratedGpu = "integrated-gpu",
        VirtualGpu = "virtual-gpu",
        /// A GPU whose kind its API does not say.
        OtherGpu = "other-gpu",
        /// A GPU API implemented in software on the CPU (lavapipe/llvmpipe, SwiftShader,
        /// WARP): a correctness row, not a GPU result.
        CpuEmulatedGpu = "cpu-emulated-gpu",
    }
);

impl DeviceKind {
    /// True for every GPU kind, emulated ones included.
    pub fn is_gpu(self) -> bool {
        self != DeviceKind::Cpu
    }

    /// True for a software GPU on the CPU.
    pub fn is_cpu_emulated(self) -> bool {
        self == DeviceKind::CpuEmulatedGpu
    }
}

vocabulary!(
    /// The training loop a cell runs (`--loop`).
    #[derive(Default)]
    TrainingLoop, "training loop", {
        /// Kiln's own minimal loop (the default).
        #[default]
        Kiln = "kiln",
        /// burn-train's supervised training: its `Learner`, dataloader, metrics and events.
        Learner = "learner",
    }
);

impl TrainingLoop {
    /// The loop as a part of a cell's coordinates: `None` for Kiln's loop, so the records
    /// written before the loop was a dimension keep their cells.
    pub fn id_part(self) -> Option<TrainingLoop> {
        (self != TrainingLoop::Kiln).then_some(self)
    }
}

vocabulary!(
    /// `--quick` or the article's protocol.
    Profile, "profile", {
        /// About ten minutes for the CPU backends: embedded sample, 3 epochs, small budget.
        Quick = "quick",
        /// The article's protocol: batch 128, 20 epochs, full datasets, a per-cell budget.
        Full = "full",
    }
);

vocabulary!(
    /// Where a cell goes when its device or precision cannot run it (`--fallback`).
    FallbackTarget, "fallback target", {
        /// A CPU device: the same backend's, else the first default backend's.
        Cpu = "cpu",
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelKind;

    fn round_trips<V: Vocabulary + fmt::Debug + serde::Serialize + serde::de::DeserializeOwned>() {
        for &v in V::ALL {
            assert_eq!(V::parse(v.name()), Ok(v));
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(json, format!("{:?}", v.name()));
            assert_eq!(serde_json::from_str::<V>(&json).unwrap(), v);
        }
        let err = V::parse("no-such-name").unwrap_err();
        assert!(err.to_string().contains(&V::names()), "{err}");
        assert!(serde_json::from_str::<V>("\"no-such-name\"").is_err());
    }

    #[test]
    fn every_vocabulary_round_trips_by_name() {
        round_trips::<ModelKind>();
        round_trips::<Precision>();
        round_trips::<DatasetName>();
        round_trips::<AutotuneLevel>();
        round_trips::<LossScalingMode>();
        round_trips::<DeviceKind>();
        round_trips::<FallbackTarget>();
        round_trips::<Profile>();
    }

    #[test]
    fn models_know_their_input() {
        assert_eq!(ModelKind::ResNet18.geometry(), Geometry::CIFAR);
        assert_eq!(ModelKind::ResNet18.standard_epoch(), 50_000);
        assert_eq!(ModelKind::ResNet18Gray.standard_epoch(), 60_000);
        assert!(DatasetName::Cifar10.fits(ModelKind::ResNet18.geometry()));
        assert!(!DatasetName::Cifar10.fits(ModelKind::MnistCnn.geometry()));
        assert!(DatasetName::Synthetic.fits(ModelKind::ResNet18.geometry()));
    }

    #[test]
    fn precisions_name_their_compute_type() {
        assert_eq!(Precision::AmpBF16.compute(), FloatKind::BF16);
        assert!(Precision::AmpF16.is_amp() && !Precision::F16.is_amp());
        // amp keeps f32 master weights; pure modes keep weights in their own type.
        assert_eq!(Precision::AmpBF16.weights(), FloatKind::F32);
        assert_eq!(Precision::BF16.weights(), FloatKind::BF16);
        assert_eq!(Precision::F32.weights(), FloatKind::F32);
        assert!(DeviceKind::CpuEmulatedGpu.is_gpu() && !DeviceKind::Cpu.is_gpu());
    }
}
