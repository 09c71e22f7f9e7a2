//! The IDX format of MNIST and Fashion-MNIST: a 4-byte magic (two zero bytes, an element type,
//! the number of dimensions), big-endian u32 sizes, then the unsigned bytes row-major.

use std::io::Read;

use crate::DataError;

/// Largest decompressed size accepted from one gzip stream (a guard against gzip bombs).
pub const MAX_DECOMPRESSED: u64 = 1 << 31;

/// One decoded IDX file of unsigned bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idx {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

/// True when `bytes` start with the gzip magic number.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// The bytes of a file, decompressed when they are gzip; `limit` bounds the output.
pub fn decompress_if_gzip(bytes: Vec<u8>, limit: u64, file: &str) -> Result<Vec<u8>, DataError> {
    if !is_gzip(&bytes) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(&bytes[..])
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| DataError::Corrupt {
            file: file.to_string(),
            why: format!("gzip stream is damaged or truncated ({e})"),
        })?;
    if out.len() as u64 > limit {
        return Err(DataError::Corrupt {
            file: file.to_string(),
            why: format!("decompresses to more than {limit} bytes"),
        });
    }
    Ok(out)
}

/// Parse an IDX file of unsigned bytes with exactly `rank` dimensions.
///
/// Sizes in the header are checked against the bytes present before anything is allocated, so
/// a header that claims huge dimensions costs nothing.
pub fn parse(bytes: Vec<u8>, rank: usize, file: &str) -> Result<Idx, DataError> {
    let corrupt = |why: String| DataError::Corrupt {
        file: file.to_string(),
        why,
    };
    if bytes.len() < 4 {
        return Err(corrupt(format!(
            "{} bytes is too short for an IDX header",
            bytes.len()
        )));
    }
    let expected_magic = [0u8, 0, 0x08, rank as u8];
    if bytes[..4] != expected_magic {
        return Err(corrupt(format!(
            "wrong magic number {:02x}{:02x}{:02x}{:02x}, expected {:02x}{:02x}{:02x}{:02x} \
             (an IDX file of unsigned bytes with {rank} dimensions)",
            bytes[0],
            bytes[1],
            bytes[2],
            bytes[3],
            expected_magic[0],
            expected_magic[1],
            expected_magic[2],
            expected_magic[3]
        )));
    }
    let header = 4 + 4 * rank;
    if bytes.len() < header {
        return Err(corrupt(format!(
            "header is cut short: {} of {header} bytes",
            bytes.len()
        )));
    }
    let dims: Vec<usize> = (0..rank)
        .map(|i| {
            let at = 4 + 4 * i;
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize
        })
        .collect();
    let claimed = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| corrupt(format!("dimensions {dims:?} overflow")))?;
    let present = bytes.len() - header;
    if claimed != present {
        let what = if claimed > present {
            "the header claims more data than the file holds"
        } else {
            "the file holds more data than its header claims"
        };
        return Err(corrupt(format!(
            "{what}: dimensions {dims:?} need {claimed} bytes, {present} are present \
             (truncated or damaged: fetch it again)"
        )));
    }
    let mut data = bytes;
    data.drain(..header);
    Ok(Idx { dims, data })
}

/// Images and their labels, checked against each other.
#[derive(Debug)]
pub struct Labelled {
    pub rows: usize,
    pub cols: usize,
    pub pixels: Vec<u8>,
    pub labels: Vec<u8>,
}

/// Images `[n, rows, cols]` and labels `[n]` of one split, checked against each other.
pub fn images_and_labels(
    images: Idx,
    labels: Idx,
    images_file: &str,
    labels_file: &str,
    classes: usize,
) -> Result<Labelled, DataError> {
    let [n, rows, cols] = images.dims[..] else {
        return Err(DataError::Corrupt {
            file: images_file.into(),
            why: format!("expected 3 dimensions, found {:?}", images.dims),
        });
    };
    if labels.dims != [n] {
        return Err(DataError::Corrupt {
            file: labels_file.into(),
            why: format!(
                "{} labels for {n} images in {images_file}: the files do not belong together",
                labels.dims.first().copied().unwrap_or(0)
            ),
        });
    }
    if let Some((i, &bad)) = labels
        .data
        .iter()
        .enumerate()
        .find(|&(_, &l)| l as usize >= classes)
    {
        return Err(DataError::Corrupt {
            file: labels_file.into(),
            why: format!("label {bad} at index {i} is not one of the {classes} classes"),
        });
    }
    Ok(Labelled {
        rows,
        cols,
        pixels: images.data,
        labels: labels.data,
    })
}

/// One split of images and labels for a model of geometry `g`: the pair checked against each
/// other, labels below its classes, images of its side.
pub fn split(
    images: Idx,
    labels: Idx,
    images_file: &str,
    labels_file: &str,
    g: crate::Geometry,
) -> Result<crate::Split, DataError> {
    let pair = images_and_labels(images, labels, images_file, labels_file, g.classes)?;
    if (pair.rows, pair.cols) != (g.height, g.width) {
        return Err(DataError::Corrupt {
            file: images_file.into(),
            why: format!(
                "images are {}×{}, the model takes {}×{}",
                pair.rows, pair.cols, g.height, g.width
            ),
        });
    }
    Ok(crate::Split {
        pixels: pair.pixels,
        labels: pair.labels,
    })
}

/// Encode `data` with `dims` as an IDX file of unsigned bytes (for tests and fixtures).
pub fn encode(dims: &[usize], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for &d in dims {
        out.extend_from_slice(&(d as u32).to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let bytes = encode(&[2, 2, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        let idx = parse(bytes, 3, "x").unwrap();
        assert_eq!(idx.dims, vec![2, 2, 3]);
        assert_eq!(idx.data.len(), 12);
    }

    #[test]
    fn wrong_magic_is_named() {
        let mut bytes = encode(&[1], &[0]);
        bytes[2] = 0x0d;
        let err = parse(bytes, 1, "labels.idx").unwrap_err().to_string();
        assert!(
            err.contains("labels.idx") && err.contains("wrong magic"),
            "{err}"
        );
    }

    #[test]
    fn huge_header_claims_do_not_allocate() {
        let bytes = encode(&[u32::MAX as usize, u32::MAX as usize, 28], &[0; 10]);
        let err = parse(bytes, 3, "big").unwrap_err().to_string();
        assert!(
            err.contains("claims more data") || err.contains("overflow"),
            "{err}"
        );
    }

    #[test]
    fn truncated_data_is_reported() {
        let mut bytes = encode(&[10], &[1; 10]);
        bytes.truncate(bytes.len() - 3);
        let err = parse(bytes, 1, "cut").unwrap_err().to_string();
        assert!(err.contains("7 are present"), "{err}");
    }

    #[test]
    fn mismatched_counts_and_bad_labels() {
        let images = parse(encode(&[2, 1, 1], &[0, 0]), 3, "i").unwrap();
        let labels = parse(encode(&[3], &[0, 0, 0]), 1, "l").unwrap();
        let err = images_and_labels(images.clone(), labels, "i", "l", 10).unwrap_err();
        assert!(err.to_string().contains("3 labels for 2 images"), "{err}");
        let labels = parse(encode(&[2], &[0, 12]), 1, "l").unwrap();
        let err = images_and_labels(images, labels, "i", "l", 10).unwrap_err();
        assert!(err.to_string().contains("label 12"), "{err}");
    }

    #[test]
    fn gzip_is_detected_and_bounded() {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write;
        let raw = encode(&[4], &[1, 2, 3, 4]);
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(&raw).unwrap();
        let gz = enc.finish().unwrap();
        assert_eq!(decompress_if_gzip(gz.clone(), 100, "g").unwrap(), raw);
        assert!(decompress_if_gzip(gz.clone(), 3, "g").is_err());
        let cut = gz[..gz.len() - 6].to_vec();
        assert!(decompress_if_gzip(cut, 100, "g").is_err());
    }
}
