//! Kiln's datasets: IDX (MNIST, Fashion-MNIST) and CIFAR-10 binary readers, the locator, the
//! manifest checks, the embedded Fashion-MNIST sample and synthetic sets. Knows no Burn backend.

pub mod cifar;
pub mod custom;
pub mod idx;
pub mod locate;
pub mod manifest;
pub mod rng;

use std::path::{Path, PathBuf};

pub use manifest::FileVerdict;

/// Everything that can go wrong reading a dataset; each message names the file and the way out.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("dataset {dataset} not found; looked in: {}. To fix: {hint}", looked.join("; "))]
    NotFound {
        dataset: String,
        looked: Vec<String>,
        hint: String,
    },
    #[error("{file}: {why}")]
    Corrupt { file: String, why: String },
    #[error(
        "{file}: checksum mismatch (expected {expected}); the file is damaged or not the official one: delete it and fetch it again"
    )]
    Checksum { file: String, expected: String },
    #[error("{file}: cannot read ({source})")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Unknown(#[from] kiln_contract::UnknownName),
}

pub use kiln_contract::{DatasetName, Geometry, Vocabulary};

/// One split held in host memory as bytes, planar per image.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Split {
    pub pixels: Vec<u8>,
    pub labels: Vec<u8>,
}

impl Split {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when the split holds no sample.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The first `n` samples (all when `n` is larger).
    pub fn truncated(mut self, n: usize, geometry: Geometry) -> Split {
        let n = n.min(self.len());
        self.labels.truncate(n);
        self.pixels.truncate(n * geometry.pixels());
        self
    }
}

/// Real files, the user's own files, or generated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An official dataset, its files verified.
    Real,
    /// The user's data (`--dataset idx|image-folder`), checked structurally.
    Custom,
    Synthetic,
}

/// A dataset in host memory, ready to be uploaded to a device once.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub name: String,
    pub origin: Origin,
    pub geometry: Geometry,
    pub train: Split,
    pub test: Split,
    /// Per-channel normalisation (applied as (x/255 - mean) / std).
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    /// The epoch every time is reported for: 60,000 (MNIST family) or 50,000 (CIFAR-10).
    pub standard_epoch: usize,
    /// Files read, with what their verification established.
    pub files: Vec<(PathBuf, FileVerdict)>,
    /// What the record should say about the data (custom data: where, sizes, digest, how it
    /// was converted).
    pub note: Option<String>,
}

impl Dataset {
    /// Pixels of `split` as f32, normalised per channel.
    pub fn normalized(&self, split: &Split) -> Vec<f32> {
        let plane = self.geometry.height * self.geometry.width;
        let channels = self.geometry.channels;
        split
            .pixels
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let c = (i / plane) % channels;
                (p as f32 / 255.0 - self.mean[c]) / self.std[c]
            })
            .collect()
    }
}

/// What to load.
#[derive(Debug, Clone)]
pub struct Request {
    pub name: DatasetName,
    /// Geometry a synthetic set takes (the model's input).
    pub geometry: Geometry,
    pub data_dir: Option<PathBuf>,
    /// Seed of synthetic data.
    pub seed: u64,
    /// Samples of a synthetic set (train, test).
    pub synthetic_sizes: (usize, usize),
}

/// Training samples of the embedded sample (the first ones of the official test set).
pub const SAMPLE_TRAIN: usize = 8_000;
static SAMPLE_IMAGES: &[u8] =
    include_bytes!("../../../datasets/fashion-mnist-sample/t10k-images-idx3-ubyte.gz");
static SAMPLE_LABELS: &[u8] =
    include_bytes!("../../../datasets/fashion-mnist-sample/t10k-labels-idx1-ubyte.gz");

pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    std::fs::read(path).map_err(|source| DataError::Io {
        file: path.display().to_string(),
        source,
    })
}

/// Read, decompress and verify one manifest file found at `path`.
fn read_verified(
    file: &manifest::ManifestFile,
    path: &Path,
) -> Result<(Vec<u8>, FileVerdict), DataError> {
    let stored = read_file(path)?;
    let cached = manifest::cached_verdict(path);
    let content = idx::decompress_if_gzip(
        stored.clone(),
        file.raw_size.min(idx::MAX_DECOMPRESSED),
        &path.display().to_string(),
    )?;
    let verdict = match cached {
        Some(v) if content.len() as u64 == file.raw_size => v,
        _ => {
            let v = manifest::verify(file, path, &stored, &content)?;
            manifest::remember_verdict(path, &v);
            v
        }
    };
    Ok((content, verdict))
}

fn load_idx_split(
    entry: &manifest::ManifestDataset,
    found: &[locate::Found],
    images_role: &str,
    labels_role: &str,
    files: &mut Vec<(PathBuf, FileVerdict)>,
) -> Result<Split, DataError> {
    let mut read = |role: &str, rank: usize| -> Result<(idx::Idx, String), DataError> {
        let hit = found
            .iter()
            .find(|f| f.role == role)
            .ok_or_else(|| DataError::Corrupt {
                file: entry.name.clone(),
                why: format!("no file for role {role}"),
            })?;
        let spec =
            entry
                .files
                .iter()
                .find(|f| f.role == role)
                .ok_or_else(|| DataError::Corrupt {
                    file: entry.name.clone(),
                    why: format!("manifest has no role {role}"),
                })?;
        let (content, verdict) = read_verified(spec, &hit.path)?;
        let shown = hit.path.display().to_string();
        files.push((hit.path.clone(), verdict));
        Ok((idx::parse(content, rank, &shown)?, shown))
    };
    let (images, images_file) = read(images_role, 3)?;
    let (labels, labels_file) = read(labels_role, 1)?;
    idx::split(images, labels, &images_file, &labels_file, Geometry::MNIST)
}

fn load_cifar(
    entry: &manifest::ManifestDataset,
    found: &[locate::Found],
    files: &mut Vec<(PathBuf, FileVerdict)>,
) -> Result<(Split, Split), DataError> {
    let mut train = Split {
        pixels: Vec::new(),
        labels: Vec::new(),
    };
    let mut test = train.clone();
    for spec in &entry.files {
        let Some(hit) = found.iter().find(|f| f.role == spec.role) else {
            continue;
        };
        let (content, verdict) = read_verified(spec, &hit.path)?;
        files.push((hit.path.clone(), verdict));
        let (pixels, labels) = cifar::parse(&content, &hit.path.display().to_string())?;
        let target = if spec.role == "test" {
            &mut test
        } else {
            &mut train
        };
        target.pixels.extend(pixels);
        target.labels.extend(labels);
    }
    Ok((train, test))
}

/// The embedded sample, decoded.
pub fn load_sample() -> Result<Dataset, DataError> {
    let images = idx::decompress_if_gzip(SAMPLE_IMAGES.to_vec(), 8_000_000, "embedded sample")?;
    let labels = idx::decompress_if_gzip(SAMPLE_LABELS.to_vec(), 20_000, "embedded sample")?;
    let images = idx::parse(images, 3, "embedded sample images")?;
    let labels = idx::parse(labels, 1, "embedded sample labels")?;
    let pair = idx::images_and_labels(images, labels, "embedded images", "embedded labels", 10)?;
    let n = pair.labels.len();
    let (pixels, labels) = (pair.pixels, pair.labels);
    let px = Geometry::MNIST.pixels();
    let split_at = SAMPLE_TRAIN.min(n);
    Ok(Dataset {
        name: DatasetName::FashionMnistSample.to_string(),
        origin: Origin::Real,
        geometry: Geometry::MNIST,
        train: Split {
            pixels: pixels[..split_at * px].to_vec(),
            labels: labels[..split_at].to_vec(),
        },
        test: Split {
            pixels: pixels[split_at * px..].to_vec(),
            labels: labels[split_at..].to_vec(),
        },
        mean: vec![0.2860],
        std: vec![0.3530],
        standard_epoch: 60_000,
        files: vec![(
            PathBuf::from("embedded:datasets/fashion-mnist-sample"),
            FileVerdict::Verified,
        )],
        note: None,
    })
}

/// A learnable synthetic set: each class lights its own band of rows, over seeded noise.
pub fn synthetic(geometry: Geometry, train: usize, test: usize, seed: u64) -> Dataset {
    let make = |n: usize, seed: u64| {
        let mut rng = rng::SplitMix64::new(seed);
        let mut pixels = Vec::with_capacity(n * geometry.pixels());
        let mut labels = Vec::with_capacity(n);
        let band = geometry.height.div_ceil(geometry.classes).max(1);
        for _ in 0..n {
            let label = (rng.next_u64() % geometry.classes as u64) as usize;
            labels.push(label as u8);
            for _c in 0..geometry.channels {
                for row in 0..geometry.height {
                    let lit = row / band == label;
                    for _col in 0..geometry.width {
                        let noise = (rng.next_u64() % 96) as u8;
                        pixels.push(if lit { 150 + noise } else { noise });
                    }
                }
            }
        }
        Split { pixels, labels }
    };
    let channels = geometry.channels;
    Dataset {
        name: DatasetName::Synthetic.to_string(),
        origin: Origin::Synthetic,
        geometry,
        train: make(train, seed),
        test: make(test, seed ^ 0x9e37_79b9_7f4a_7c15),
        mean: vec![0.5; channels],
        std: vec![0.5; channels],
        standard_epoch: geometry.standard_epoch(),
        files: Vec::new(),
        note: None,
    }
}

/// Load the dataset a request names.
pub fn load(request: &Request) -> Result<Dataset, DataError> {
    let name = request.name;
    match name {
        DatasetName::Synthetic => {
            let (train, test) = request.synthetic_sizes;
            Ok(synthetic(request.geometry, train, test, request.seed))
        }
        DatasetName::FashionMnistSample => load_sample(),
        DatasetName::Idx => custom::load_idx_dir(
            custom_dir(name, request.data_dir.as_deref())?,
            request.geometry,
        ),
        DatasetName::ImageFolder => custom::load_image_folder(
            custom_dir(name, request.data_dir.as_deref())?,
            request.geometry,
        ),
        DatasetName::Mnist | DatasetName::FashionMnist | DatasetName::Cifar10 => {
            let entry = manifest_entry(name)?;
            let found = locate::locate(entry, request.data_dir.as_deref())?;
            let mut files = Vec::new();
            let (train, test, mean, std) = if name == DatasetName::Cifar10 {
                let (train, test) = load_cifar(entry, &found, &mut files)?;
                (
                    train,
                    test,
                    vec![0.4914, 0.4822, 0.4465],
                    vec![0.2470, 0.2435, 0.2616],
                )
            } else {
                let train =
                    load_idx_split(entry, &found, "train-images", "train-labels", &mut files)?;
                let test = load_idx_split(entry, &found, "test-images", "test-labels", &mut files)?;
                let (mean, std) = if name == DatasetName::Mnist {
                    (0.1307, 0.3081)
                } else {
                    (0.2860, 0.3530)
                };
                (train, test, vec![mean], vec![std])
            };
            let geometry = name.geometry().unwrap_or(request.geometry);
            Ok(Dataset {
                name: name.to_string(),
                origin: Origin::Real,
                geometry,
                train,
                test,
                mean,
                std,
                standard_epoch: geometry.standard_epoch(),
                files,
                note: None,
            })
        }
    }
}

/// The directory a custom dataset is read from (`--data-dir`, required).
fn custom_dir(name: DatasetName, data_dir: Option<&Path>) -> Result<&Path, DataError> {
    match data_dir {
        Some(dir) if dir.is_dir() => Ok(dir),
        other => Err(DataError::NotFound {
            dataset: name.to_string(),
            looked: other.iter().map(|d| d.display().to_string()).collect(),
            hint: format!(
                "--dataset {name} reads your own files: pass --data-dir DIR ({})",
                if name == DatasetName::Idx {
                    "holding train and test/t10k IDX image and label files"
                } else {
                    "holding one sub-folder of images per class"
                }
            ),
        }),
    }
}

/// The manifest entry of a real dataset that is read from files.
fn manifest_entry(name: DatasetName) -> Result<&'static manifest::ManifestDataset, DataError> {
    manifest::dataset(name.name()).ok_or_else(|| {
        DataError::Unknown(kiln_contract::UnknownName {
            what: "dataset in datasets/manifest.json",
            given: name.to_string(),
            known: "mnist, fashion-mnist, cifar-10".into(),
        })
    })
}

/// Whether a real dataset can be found (for planning, without reading it).
pub fn available(name: DatasetName, data_dir: Option<&Path>) -> Result<(), DataError> {
    match name {
        DatasetName::Synthetic | DatasetName::FashionMnistSample => Ok(()),
        DatasetName::Idx | DatasetName::ImageFolder => custom_dir(name, data_dir).map(|_| ()),
        DatasetName::Mnist | DatasetName::FashionMnist | DatasetName::Cifar10 => {
            locate::locate(manifest_entry(name)?, data_dir).map(|_| ())
        }
    }
}

/// The dataset a model of `geometry` trains on when none is named, with a note when Kiln had
/// to fall back: quick runs use the embedded sample; full runs MNIST, else Fashion-MNIST;
/// CIFAR-sized models CIFAR-10, else synthetic data (labelled as such in every record).
pub fn default_dataset(
    geometry: Geometry,
    quick: bool,
    data_dir: Option<&Path>,
) -> Result<(DatasetName, Option<String>), DataError> {
    if geometry == Geometry::CIFAR {
        return Ok(match available(DatasetName::Cifar10, data_dir) {
            Ok(()) => (DatasetName::Cifar10, None),
            Err(e) => (
                DatasetName::Synthetic,
                Some(format!(
                    "CIFAR-10 not found, synthetic data used instead ({e})"
                )),
            ),
        });
    }
    if quick {
        return Ok((DatasetName::FashionMnistSample, None));
    }
    match available(DatasetName::Mnist, data_dir) {
        Ok(()) => Ok((DatasetName::Mnist, None)),
        Err(mnist_missing) => match available(DatasetName::FashionMnist, data_dir) {
            Ok(()) => Ok((
                DatasetName::FashionMnist,
                Some("MNIST not found: Fashion-MNIST (same format and size) used instead".into()),
            )),
            Err(_) => Err(mnist_missing),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_sample_is_real_fashion_mnist() {
        let d = load_sample().unwrap();
        assert_eq!(d.train.len(), 8_000);
        assert_eq!(d.test.len(), 2_000);
        assert_eq!(d.train.pixels.len(), 8_000 * 784);
        let mut counts = [0usize; 10];
        d.test.labels.iter().for_each(|&l| counts[l as usize] += 1);
        assert!(
            counts.iter().all(|&c| c > 150),
            "classes are balanced: {counts:?}"
        );
    }

    #[test]
    fn synthetic_is_deterministic_and_shaped() {
        let a = synthetic(Geometry::CIFAR, 20, 5, 7);
        let b = synthetic(Geometry::CIFAR, 20, 5, 7);
        assert_eq!(a.train, b.train);
        assert_eq!(a.train.pixels.len(), 20 * 3 * 32 * 32);
        assert_eq!(a.origin, Origin::Synthetic);
        assert_ne!(a.train, synthetic(Geometry::CIFAR, 20, 5, 8).train);
    }

    #[test]
    fn normalisation_is_per_channel() {
        let mut d = synthetic(Geometry::CIFAR, 1, 1, 1);
        d.train.pixels = vec![255; 3072];
        d.mean = vec![0.0, 0.5, 1.0];
        d.std = vec![1.0, 0.5, 1.0];
        let x = d.normalized(&d.train);
        assert_eq!((x[0], x[1024], x[2048]), (1.0, 1.0, 0.0));
    }
}

#[cfg(test)]
mod locate_tests {
    use super::*;

    fn request(name: DatasetName, dir: &Path) -> Request {
        Request {
            name,
            geometry: name.geometry().unwrap_or(Geometry::MNIST),
            data_dir: Some(dir.to_path_buf()),
            seed: 0,
            synthetic_sizes: (0, 0),
        }
    }

    #[test]
    fn cifar_batches_in_the_official_layout_are_found_and_read() {
        let tmp = tempfile::tempdir().unwrap();
        // `--data-dir DIR` with the files in DIR/cifar-10/cifar-10-batches-bin/.
        let dir = tmp.path().join("cifar-10").join("cifar-10-batches-bin");
        std::fs::create_dir_all(&dir).unwrap();
        let n = 10_000;
        let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        for (k, name) in [
            "data_batch_1.bin",
            "data_batch_2.bin",
            "data_batch_3.bin",
            "data_batch_4.bin",
            "data_batch_5.bin",
            "test_batch.bin",
        ]
        .iter()
        .enumerate()
        {
            let pixels: Vec<u8> = (0..n * 3072).map(|i| ((i + k) % 251) as u8).collect();
            std::fs::write(dir.join(name), cifar::encode(&pixels, &labels)).unwrap();
        }
        let d = load(&request(DatasetName::Cifar10, tmp.path())).unwrap();
        assert_eq!((d.train.len(), d.test.len()), (50_000, 10_000));
        assert_eq!(d.geometry, Geometry::CIFAR);
        assert_eq!(d.train.labels[..3], [0, 1, 2]);
        assert_eq!(d.files.len(), 6);
        assert!(d.files.iter().all(|(_, v)| *v == FileVerdict::SizeOnly));
    }

    #[test]
    fn a_truncated_cifar_batch_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        for name in [
            "data_batch_1.bin",
            "data_batch_2.bin",
            "data_batch_3.bin",
            "data_batch_4.bin",
            "data_batch_5.bin",
            "test_batch.bin",
        ] {
            std::fs::write(tmp.path().join(name), vec![0u8; 3073 * 2]).unwrap();
        }
        let err = load(&request(DatasetName::Cifar10, tmp.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("data_batch_1.bin") && err.contains("6146 bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_partial_dataset_directory_lists_what_is_missing() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("train-images-idx3-ubyte.gz"), b"x").unwrap();
        let err = available(DatasetName::Mnist, Some(tmp.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("1 of 4 files") && err.contains("t10k-labels-idx1-ubyte"),
            "{err}"
        );
        assert!(err.contains("cargo xtask fetch-data mnist"), "{err}");
    }

    #[test]
    fn the_embedded_files_match_the_manifest_digests() {
        let entry = manifest::dataset("fashion-mnist").unwrap();
        for (role, stored) in [
            ("test-images", SAMPLE_IMAGES),
            ("test-labels", SAMPLE_LABELS),
        ] {
            let file = entry.files.iter().find(|f| f.role == role).unwrap();
            let content = idx::decompress_if_gzip(stored.to_vec(), file.raw_size, role).unwrap();
            let verdict = manifest::verify(file, Path::new(role), stored, &content).unwrap();
            assert_eq!(verdict, FileVerdict::Verified);
        }
    }

    /// The Debian package's full Fashion-MNIST, where installed (CI installs it).
    #[test]
    fn the_system_fashion_mnist_is_found_and_verified_when_installed() {
        let system = Path::new("/usr/share/datasets/fashion-mnist");
        if !system.join("train-images-idx3-ubyte.gz").is_file() {
            kiln_contract::testing::skip(
                "the_system_fashion_mnist_is_found_and_verified_when_installed",
                "dataset-fashion-mnist is not installed (apt-get install dataset-fashion-mnist)",
            );
            return;
        }
        let d = load(&Request {
            name: DatasetName::FashionMnist,
            geometry: Geometry::MNIST,
            data_dir: None,
            seed: 0,
            synthetic_sizes: (0, 0),
        })
        .unwrap();
        assert_eq!((d.train.len(), d.test.len()), (60_000, 10_000));
        assert!(
            d.files.iter().all(|(_, v)| *v == FileVerdict::Verified),
            "{:?}",
            d.files
        );
    }
}
