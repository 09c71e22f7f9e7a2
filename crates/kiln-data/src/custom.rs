//! The user's own data: any IDX image/label pairs of the model's input shape
//! (`--dataset idx`), or a folder of images with one sub-folder per class
//! (`--dataset image-folder`). Checked structurally, since no official checksum can exist;
//! the record says `custom` and carries a digest of the content and the sizes.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{DataError, Dataset, FileVerdict, Geometry, Origin, Split, idx, read_file};

/// Largest IDX file accepted (decompressed).
const MAX_IDX_BYTES: u64 = 1 << 31;

fn corrupt(file: &Path, why: impl Into<String>) -> DataError {
    DataError::Corrupt {
        file: file.display().to_string(),
        why: why.into(),
    }
}

fn list(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DataError::Io {
        file: dir.display().to_string(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    Ok(paths)
}

/// The file of `dir` whose name says `split` (`train`, or `test`/`t10k`) and `kind` (`images`
/// or `labels`); exactly one must match.
fn pick(dir: &Path, files: &[PathBuf], split: &[&str], kind: &str) -> Result<PathBuf, DataError> {
    let hits: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().to_lowercase())
                .unwrap_or_default();
            p.is_file() && name.contains(kind) && split.iter().any(|s| name.contains(s))
        })
        .collect();
    match hits[..] {
        [one] => Ok(one.clone()),
        [] => Err(DataError::NotFound {
            dataset: "idx".into(),
            looked: vec![dir.display().to_string()],
            hint: format!(
                "put four IDX files in the directory, named like MNIST's: a {} {kind} file \
                 (e.g. {}-{kind}-idx{}-ubyte, raw or .gz) and the same for the other split",
                split.join("/"),
                split[0],
                if kind == "images" { 3 } else { 1 }
            ),
        }),
        _ => Err(corrupt(
            dir,
            format!(
                "{} files look like {} {kind} ({}); keep one",
                hits.len(),
                split.join("/"),
                hits.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Per-channel mean and standard deviation of `split`'s pixels (scaled to 0..1): custom data
/// is normalised by its own training split.
fn stats(split: &Split, g: Geometry) -> (Vec<f32>, Vec<f32>) {
    let plane = g.height * g.width;
    let mut sum = vec![0f64; g.channels];
    let mut squares = vec![0f64; g.channels];
    for (i, &p) in split.pixels.iter().enumerate() {
        let c = (i / plane) % g.channels;
        let v = f64::from(p) / 255.0;
        sum[c] += v;
        squares[c] += v * v;
    }
    let n = (split.len() * plane).max(1) as f64;
    let mean: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
    let std = squares
        .iter()
        .zip(&sum)
        .map(|(q, s)| {
            let m = s / n;
            // A constant image set would divide by zero: keep it unscaled.
            ((q / n - m * m).max(0.0).sqrt() as f32).max(1e-3)
        })
        .collect();
    (mean, std)
}

/// A short digest of everything read, for the record.
fn digest(hasher: Sha256) -> String {
    let bytes = hasher.finalize();
    bytes.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn dataset(
    name: &str,
    g: Geometry,
    train: Split,
    test: Split,
    files: Vec<(PathBuf, FileVerdict)>,
    note: String,
) -> Result<Dataset, DataError> {
    if train.is_empty() {
        return Err(corrupt(
            files.first().map_or(Path::new(name), |(p, _)| p.as_path()),
            "no training image",
        ));
    }
    let (mean, std) = stats(&train, g);
    Ok(Dataset {
        name: name.into(),
        origin: Origin::Custom,
        geometry: g,
        train,
        test,
        mean,
        std,
        standard_epoch: g.standard_epoch(),
        files,
        note: Some(note),
    })
}

/// `--dataset idx --data-dir DIR`: the training and test IDX pairs in `dir`, of any size, whose
/// images must be the model's single-channel `height`×`width`.
pub fn load_idx_dir(dir: &Path, g: Geometry) -> Result<Dataset, DataError> {
    if g.channels != 1 {
        return Err(corrupt(
            dir,
            format!(
                "IDX images have one channel and this model takes {}×{}×{}: use a 1-channel \
                 model (mnist-cnn, resnet18-gray) or --dataset image-folder",
                g.channels, g.height, g.width
            ),
        ));
    }
    let files = list(dir)?;
    let mut hasher = Sha256::new();
    let mut read_files = Vec::new();
    let mut split = |names: &[&str]| -> Result<Split, DataError> {
        let images_path = pick(dir, &files, names, "images")?;
        let labels_path = pick(dir, &files, names, "labels")?;
        let mut parse = |path: &Path, rank: usize| -> Result<idx::Idx, DataError> {
            let shown = path.display().to_string();
            let bytes = idx::decompress_if_gzip(read_file(path)?, MAX_IDX_BYTES, &shown)?;
            hasher.update(&bytes);
            read_files.push((path.to_path_buf(), FileVerdict::Custom));
            idx::parse(bytes, rank, &shown)
        };
        let images = parse(&images_path, 3)?;
        let labels = parse(&labels_path, 1)?;
        idx::split(
            images,
            labels,
            &images_path.display().to_string(),
            &labels_path.display().to_string(),
            g,
        )
    };
    let train = split(&["train"])?;
    let test = split(&["test", "t10k"])?;
    let note = format!(
        "custom IDX data from {}: {} training and {} test images, sha256 {}",
        dir.display(),
        train.len(),
        test.len(),
        digest(hasher)
    );
    dataset("idx", g, train, test, read_files, note)
}

/// One image decoded and converted to the model's input: grey or RGB, resized to
/// `height`×`width` (bilinear), planar.
fn image_pixels(path: &Path, g: Geometry) -> Result<Vec<u8>, DataError> {
    let bytes = read_file(path)?;
    let img = image::load_from_memory(&bytes)
        .map_err(|e| corrupt(path, format!("not an image Kiln can read ({e})")))?;
    let (w, h) = (g.width as u32, g.height as u32);
    let filter = image::imageops::FilterType::Triangle;
    Ok(if g.channels == 1 {
        image::imageops::resize(&img.to_luma8(), w, h, filter).into_raw()
    } else {
        let rgb = image::imageops::resize(&img.to_rgb8(), w, h, filter).into_raw();
        // Interleaved RGB to planar.
        let plane = (w * h) as usize;
        let mut planar = vec![0u8; 3 * plane];
        for (i, px) in rgb.chunks_exact(3).enumerate() {
            for c in 0..3 {
                planar[c * plane + i] = px[c];
            }
        }
        planar
    })
}

/// The class folders of `dir` (sorted by name), with their images (sorted).
fn classes(dir: &Path) -> Result<Vec<(String, Vec<PathBuf>)>, DataError> {
    let mut out = Vec::new();
    for class in list(dir)?.into_iter().filter(|p| p.is_dir()) {
        let name = class
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let images: Vec<PathBuf> = list(&class)?.into_iter().filter(|p| p.is_file()).collect();
        if images.is_empty() {
            return Err(corrupt(&class, "class folder without a file"));
        }
        out.push((name, images));
    }
    Ok(out)
}

/// `--dataset image-folder --data-dir DIR`: `DIR/<class>/<image>` (split 80/20: every fifth
/// image of each class, in name order, is a test image), or `DIR/train/<class>/...` and
/// `DIR/test/<class>/...`. Images are converted to the model's channels and resized to its
/// input.
pub fn load_image_folder(dir: &Path, g: Geometry) -> Result<Dataset, DataError> {
    let (train_dir, test_dir) = (dir.join("train"), dir.join("test"));
    let presplit = train_dir.is_dir() && test_dir.is_dir();
    let train_classes = classes(if presplit { &train_dir } else { dir })?;
    if train_classes.is_empty() {
        return Err(DataError::NotFound {
            dataset: "image-folder".into(),
            looked: vec![dir.display().to_string()],
            hint: "make one sub-folder per class holding its images (PNG or JPEG), or train/ \
                   and test/ folders each holding the class sub-folders"
                .into(),
        });
    }
    if train_classes.len() > g.classes {
        return Err(corrupt(
            dir,
            format!(
                "{} class folders, the model has {} outputs",
                train_classes.len(),
                g.classes
            ),
        ));
    }
    let names: Vec<&str> = train_classes.iter().map(|(n, _)| n.as_str()).collect();
    let mut hasher = Sha256::new();
    let mut files = Vec::new();
    let (mut train, mut test) = (Split::default(), Split::default());
    let mut add = |path: &Path, label: usize, into: &mut Split| -> Result<(), DataError> {
        let pixels = image_pixels(path, g)?;
        hasher.update(&pixels);
        into.pixels.extend_from_slice(&pixels);
        into.labels.push(label as u8);
        files.push((path.to_path_buf(), FileVerdict::Custom));
        Ok(())
    };
    for (label, (_, images)) in train_classes.iter().enumerate() {
        for (i, path) in images.iter().enumerate() {
            let to_test = !presplit && i % 5 == 4;
            add(path, label, if to_test { &mut test } else { &mut train })?;
        }
    }
    if presplit {
        for (name, images) in classes(&test_dir)? {
            let label = names.iter().position(|n| *n == name).ok_or_else(|| {
                corrupt(
                    &test_dir.join(&name),
                    format!(
                        "class {name:?} is not among the training classes ({})",
                        names.join(", ")
                    ),
                )
            })?;
            for path in &images {
                add(path, label, &mut test)?;
            }
        }
    }
    let note = format!(
        "custom image folder {}: {} training and {} test images in {} classes ({}), converted to \
         {}×{}×{} ({}, bilinear resize){}, sha256 {}",
        dir.display(),
        train.len(),
        test.len(),
        names.len(),
        names.join(", "),
        g.channels,
        g.height,
        g.width,
        if g.channels == 1 { "grey" } else { "RGB" },
        if presplit {
            ""
        } else {
            ", every fifth image of a class held out for test"
        },
        digest(hasher)
    );
    dataset("image-folder", g, train, test, files, note)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) {
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    fn idx_pair(dir: &Path, split: &str, n: usize, side: usize, label: u8) {
        let pixels: Vec<u8> = (0..n * side * side).map(|i| (i % 251) as u8).collect();
        write(
            dir,
            &format!("{split}-images-idx3-ubyte"),
            &idx::encode(&[n, side, side], &pixels),
        );
        write(
            dir,
            &format!("{split}-labels-idx1-ubyte"),
            &idx::encode(&[n], &vec![label; n]),
        );
    }

    #[test]
    fn an_idx_pair_of_any_size_loads_as_custom_data() {
        let dir = tempfile::tempdir().unwrap();
        idx_pair(dir.path(), "train", 12, 28, 3);
        idx_pair(dir.path(), "t10k", 5, 28, 9);
        let d = load_idx_dir(dir.path(), Geometry::MNIST).unwrap();
        assert_eq!((d.train.len(), d.test.len()), (12, 5));
        assert_eq!(d.origin, Origin::Custom);
        let note = d.note.unwrap_or_default();
        assert!(
            note.contains("12 training and 5 test images, sha256 "),
            "{note}"
        );
        assert!(d.std[0] > 0.0 && d.mean[0] > 0.0);
    }

    #[test]
    fn malformed_idx_files_are_named_with_their_problem() {
        let dir = tempfile::tempdir().unwrap();
        idx_pair(dir.path(), "train", 4, 32, 1);
        idx_pair(dir.path(), "test", 2, 32, 1);
        let e = load_idx_dir(dir.path(), Geometry::MNIST)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("train-images-idx3-ubyte: images are 32×32, the model takes 28×28"),
            "{e}"
        );

        idx_pair(dir.path(), "train", 4, 28, 12);
        let e = load_idx_dir(dir.path(), Geometry::MNIST)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("train-labels-idx1-ubyte: label 12 at index 0"),
            "{e}"
        );

        idx_pair(dir.path(), "train", 4, 28, 1);
        let images = idx::encode(&[4, 28, 28], &[0; 100]);
        write(dir.path(), "train-images-idx3-ubyte", &images);
        let e = load_idx_dir(dir.path(), Geometry::MNIST)
            .unwrap_err()
            .to_string();
        assert!(e.contains("train-images-idx3-ubyte:"), "{e}");

        std::fs::remove_file(dir.path().join("test-labels-idx1-ubyte")).unwrap();
        idx_pair(dir.path(), "train", 4, 28, 1);
        let e = load_idx_dir(dir.path(), Geometry::MNIST)
            .unwrap_err()
            .to_string();
        assert!(e.contains("test/t10k labels"), "{e}");

        let e = load_idx_dir(dir.path(), Geometry::CIFAR)
            .unwrap_err()
            .to_string();
        assert!(e.contains("IDX images have one channel"), "{e}");
    }

    fn png(path: &Path, side: u32, shade: u8) {
        let img = image::RgbImage::from_pixel(side, side, image::Rgb([shade, 255 - shade, 7]));
        img.save(path).unwrap();
    }

    #[test]
    fn an_image_folder_is_split_converted_and_resized() {
        let dir = tempfile::tempdir().unwrap();
        for (c, class) in ["cat", "dog"].iter().enumerate() {
            std::fs::create_dir(dir.path().join(class)).unwrap();
            for i in 0..5 {
                png(
                    &dir.path().join(class).join(format!("{i}.png")),
                    40,
                    (c * 100 + i) as u8,
                );
            }
        }
        let d = load_image_folder(dir.path(), Geometry::MNIST).unwrap();
        assert_eq!((d.train.len(), d.test.len()), (8, 2));
        assert_eq!(d.train.pixels.len(), 8 * 28 * 28);
        assert_eq!(d.test.labels, [0, 1]);
        let note = d.note.unwrap_or_default();
        assert!(
            note.contains("2 classes (cat, dog), converted to 1×28×28 (grey"),
            "{note}"
        );

        let rgb = load_image_folder(dir.path(), Geometry::CIFAR).unwrap();
        assert_eq!(rgb.train.pixels.len(), 8 * 3 * 32 * 32);
        // Planar: the first plane is red, the shade of the first cat.
        assert_eq!(rgb.train.pixels[0], 0);
        assert_eq!(rgb.train.pixels[32 * 32], 255);
    }

    #[test]
    fn a_broken_image_or_folder_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = load_image_folder(dir.path(), Geometry::MNIST)
            .unwrap_err()
            .to_string();
        assert!(e.contains("one sub-folder per class"), "{e}");
        std::fs::create_dir(dir.path().join("a")).unwrap();
        write(&dir.path().join("a"), "x.png", b"not a png");
        let e = load_image_folder(dir.path(), Geometry::MNIST)
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.png: not an image Kiln can read"), "{e}");
        for i in 0..11 {
            let class = dir.path().join(format!("c{i}"));
            std::fs::create_dir(&class).unwrap();
            write(
                &class,
                "x.png",
                b"never decoded: the count is checked first",
            );
        }
        let e = load_image_folder(dir.path(), Geometry::MNIST)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("12 class folders, the model has 10 outputs"),
            "{e}"
        );
    }
}
