//! The dataset manifest (`datasets/manifest.json`), compiled in, and file verification against it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::DataError;

const MANIFEST_JSON: &str = include_str!("../../../datasets/manifest.json");

/// The whole manifest.
#[derive(Deserialize, Debug)]
pub struct Manifest {
    pub datasets: Vec<ManifestDataset>,
}

/// One dataset of the manifest.
#[derive(Deserialize, Debug)]
pub struct ManifestDataset {
    pub name: String,
    pub title: String,
    pub licence: String,
    pub homepage: String,
    pub base_url: String,
    pub archive: Option<Archive>,
    pub files: Vec<ManifestFile>,
}

/// A tarball the files come in (CIFAR-10).
#[derive(Deserialize, Debug)]
pub struct Archive {
    pub name: String,
    pub size: u64,
    pub sha256: String,
    pub member_dir: String,
}

/// One file of a dataset.
#[derive(Deserialize, Debug)]
pub struct ManifestFile {
    pub role: String,
    pub name: String,
    pub raw_size: u64,
    pub content_sha256: Option<String>,
    pub gz_size: Option<u64>,
    pub gz_sha256: Vec<String>,
}

/// The compiled-in manifest.
pub fn manifest() -> &'static Manifest {
    static MANIFEST: OnceLock<Manifest> = OnceLock::new();
    MANIFEST.get_or_init(|| {
        serde_json::from_str(MANIFEST_JSON)
            .unwrap_or_else(|e| panic!("datasets/manifest.json is invalid (a build bug): {e}"))
    })
}

/// The manifest entry of `name`.
pub fn dataset(name: &str) -> Option<&'static ManifestDataset> {
    manifest().datasets.iter().find(|d| d.name == name)
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What verification established about a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileVerdict {
    /// A known SHA-256 matched.
    Verified,
    /// No digest is known for this form of the file: only its size was checked.
    SizeOnly,
    /// The user's own file: checked structurally, its digest recorded.
    Custom,
}

/// Check a file's stored bytes (`stored`, as on disk) and decompressed bytes (`content`).
pub fn verify(
    file: &ManifestFile,
    path: &Path,
    stored: &[u8],
    content: &[u8],
) -> Result<FileVerdict, DataError> {
    let shown = path.display().to_string();
    if content.len() as u64 != file.raw_size {
        return Err(DataError::Corrupt {
            file: shown,
            why: format!(
                "{} bytes of data, the official file has {} (truncated or a different file: fetch it again)",
                content.len(),
                file.raw_size
            ),
        });
    }
    let was_gzip = crate::idx::is_gzip(stored);
    let mut expected = Vec::new();
    if was_gzip && !file.gz_sha256.is_empty() {
        if file.gz_sha256.contains(&sha256_hex(stored)) {
            return Ok(FileVerdict::Verified);
        }
        expected.push(format!("gzip sha256 one of {:?}", file.gz_sha256));
    }
    if let Some(want) = &file.content_sha256 {
        let got = sha256_hex(content);
        if &got == want {
            return Ok(FileVerdict::Verified);
        }
        expected.push(format!("content sha256 {want}, got {got}"));
    }
    if expected.is_empty() {
        return Ok(FileVerdict::SizeOnly);
    }
    Err(DataError::Checksum {
        file: shown,
        expected: expected.join("; "),
    })
}

/// Where verdicts are cached: `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KILN_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("kiln"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("kiln"))
}

#[derive(Serialize, Deserialize, Default)]
struct VerdictCache {
    /// Keyed by canonical path; valid while size and modification time are unchanged.
    entries: BTreeMap<String, CachedVerdict>,
}

#[derive(Serialize, Deserialize, Clone)]
struct CachedVerdict {
    size: u64,
    modified_ns: u128,
    verdict: FileVerdict,
}

fn file_key(path: &Path) -> Option<(String, u64, u128)> {
    let meta = std::fs::metadata(path).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    let canonical = std::fs::canonicalize(path).ok()?;
    Some((canonical.display().to_string(), meta.len(), modified))
}

fn cache_file() -> Option<PathBuf> {
    cache_dir().map(|d| d.join("verified.json"))
}

/// A verdict cached for this exact file (same path, size and modification time).
pub fn cached_verdict(path: &Path) -> Option<FileVerdict> {
    let (key, size, modified_ns) = file_key(path)?;
    let text = std::fs::read_to_string(cache_file()?).ok()?;
    let cache: VerdictCache = serde_json::from_str(&text).ok()?;
    let hit = cache.entries.get(&key)?;
    (hit.size == size && hit.modified_ns == modified_ns).then(|| hit.verdict.clone())
}

/// Remember a verdict; failures to write the cache only cost a re-check next time.
pub fn remember_verdict(path: &Path, verdict: &FileVerdict) {
    let (Some((key, size, modified_ns)), Some(file)) = (file_key(path), cache_file()) else {
        return;
    };
    let mut cache: VerdictCache = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    // Forget files that are gone (temporary directories, moved datasets).
    cache.entries.retain(|k, _| Path::new(k).exists());
    cache.entries.insert(
        key,
        CachedVerdict {
            size,
            modified_ns,
            verdict: verdict.clone(),
        },
    );
    if let (Some(dir), Ok(text)) = (file.parent(), serde_json::to_string_pretty(&cache)) {
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::create_dir_all(dir).is_ok() && std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_parses_and_knows_the_datasets() {
        for name in ["mnist", "fashion-mnist", "cifar-10"] {
            assert!(dataset(name).is_some(), "{name}");
        }
    }

    #[test]
    fn size_then_digest_are_checked() {
        let file = ManifestFile {
            role: "x".into(),
            name: "x".into(),
            raw_size: 3,
            content_sha256: Some(sha256_hex(b"abc")),
            gz_size: None,
            gz_sha256: vec![],
        };
        let p = Path::new("x");
        assert_eq!(
            verify(&file, p, b"abc", b"abc").unwrap(),
            FileVerdict::Verified
        );
        assert!(
            verify(&file, p, b"abd", b"abd")
                .unwrap_err()
                .to_string()
                .contains("sha256")
        );
        assert!(
            verify(&file, p, b"ab", b"ab")
                .unwrap_err()
                .to_string()
                .contains("2 bytes")
        );
        let unknown = ManifestFile {
            content_sha256: None,
            ..file
        };
        assert_eq!(
            verify(&unknown, p, b"abd", b"abd").unwrap(),
            FileVerdict::SizeOnly
        );
    }
}
