//! `cargo xtask fetch-data NAME`: download official dataset files, verified by SHA-256.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use kiln_data::{locate, manifest};

/// Why a download failed; a checksum mismatch is told apart from an unreachable server.
#[derive(Debug)]
pub enum FetchError {
    Network(String),
    Checksum {
        url: String,
        expected: String,
        got: String,
    },
    Size {
        url: String,
        expected: u64,
        got: u64,
    },
    Io(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Network(e) => write!(f, "{e}"),
            FetchError::Checksum { url, expected, got } => write!(
                f,
                "{url}: checksum mismatch (sha256 {got}, expected {expected}); nothing was kept"
            ),
            FetchError::Size { url, expected, got } => write!(
                f,
                "{url}: {got} bytes received, {expected} expected; nothing was kept"
            ),
            FetchError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FetchError {}

/// Download `url` to `dest`, streaming through SHA-256; the file appears only if its digest is
/// one of `accepted` (and its size is `size`, when given).
pub fn download(
    url: &str,
    dest: &Path,
    accepted: &[String],
    size: Option<u64>,
) -> Result<(), FetchError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_global(Some(Duration::from_secs(3600)))
        .build()
        .into();
    let mut response = agent
        .get(url)
        .call()
        .map_err(|e| FetchError::Network(format!("cannot download {url}: {e}")))?;
    let part = dest.with_extension("part");
    let result = (|| {
        let mut file = File::create(&part)
            .map_err(|e| FetchError::Io(format!("cannot create {}: {e}", part.display())))?;
        let mut reader = response.body_mut().with_config().limit(u64::MAX).reader();
        let mut hasher = Sha256::new();
        let mut total = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = reader
                .read(&mut buf)
                .map_err(|e| FetchError::Network(format!("download of {url} broke off: {e}")))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| FetchError::Io(format!("cannot write {}: {e}", part.display())))?;
            total += n as u64;
        }
        file.sync_all()
            .map_err(|e| FetchError::Io(format!("cannot write {}: {e}", part.display())))?;
        if let Some(expected) = size
            && expected != total
        {
            return Err(FetchError::Size {
                url: url.into(),
                expected,
                got: total,
            });
        }
        let got: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if !accepted.contains(&got) {
            return Err(FetchError::Checksum {
                url: url.into(),
                expected: accepted.join(" or "),
                got,
            });
        }
        std::fs::rename(&part, dest)
            .map_err(|e| FetchError::Io(format!("cannot move into {}: {e}", dest.display())))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    result
}

fn offline_note(name: &str, err: &FetchError) -> String {
    match err {
        FetchError::Network(_) => format!(
            "{err}\nNo network? Offline routes: {}",
            locate::fetch_hint(name)
        ),
        other => other.to_string(),
    }
}

fn sha256_of(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(manifest::sha256_hex(&bytes))
}

/// Fetch dataset `name` into `dest` (default `datasets/cache/<name>/`).
pub fn fetch_data(name: &str, dest: Option<PathBuf>, base_url: Option<&str>) -> Result<()> {
    if name == kiln_data::DatasetName::FashionMnistSample.name() {
        println!("{name} is embedded in Kiln: nothing to fetch");
        return Ok(());
    }
    let entry = manifest::dataset(name).with_context(|| {
        format!(
            "unknown dataset {name:?}; fetch-data knows: {}",
            manifest::manifest()
                .datasets
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let dest = dest.unwrap_or_else(|| locate::workspace_cache().join(name));
    std::fs::create_dir_all(&dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let base = base_url.unwrap_or(&entry.base_url);
    let base = if base.ends_with('/') {
        base.to_string()
    } else {
        format!("{base}/")
    };
    eprintln!(
        "kiln: {} ({}), licence: {}",
        entry.title, entry.homepage, entry.licence
    );

    if let Some(archive) = &entry.archive {
        let tarball = dest.join(&archive.name);
        let url = format!("{base}{}", archive.name);
        let accepted = vec![archive.sha256.clone()];
        if sha256_of(&tarball).as_ref() != Some(&archive.sha256) {
            eprintln!("kiln: downloading {url} ({} MB)", archive.size / 1_000_000);
            download(&url, &tarball, &accepted, Some(archive.size))
                .map_err(|e| anyhow::anyhow!(offline_note(name, &e)))?;
        }
        extract(&tarball, &archive.member_dir, &dest, entry)?;
        std::fs::remove_file(&tarball).ok();
    } else {
        for file in &entry.files {
            let target = dest.join(format!("{}.gz", file.name));
            if sha256_of(&target).is_some_and(|d| file.gz_sha256.contains(&d)) {
                eprintln!("kiln: {} is already here and verified", target.display());
                continue;
            }
            let url = format!("{base}{}.gz", file.name);
            eprintln!("kiln: downloading {url}");
            download(&url, &target, &file.gz_sha256, file.gz_size)
                .map_err(|e| anyhow::anyhow!(offline_note(name, &e)))?;
        }
    }
    println!("{name}: verified files in {}", dest.display());
    Ok(())
}

/// Extract the manifest's files from a `.tar.gz` into `dest`, checking their sizes.
fn extract(
    tarball: &Path,
    member_dir: &str,
    dest: &Path,
    entry: &manifest::ManifestDataset,
) -> Result<()> {
    let file = File::open(tarball).with_context(|| format!("cannot open {}", tarball.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut extracted = 0;
    for item in archive
        .entries()
        .with_context(|| format!("{}: not a tar.gz archive", tarball.display()))?
    {
        let mut item = item.with_context(|| format!("{}: damaged archive", tarball.display()))?;
        let path = item.path()?.into_owned();
        let Some(wanted) = entry.files.iter().find(|f| {
            path.parent().is_some_and(|p| p.ends_with(member_dir))
                && path.file_name().is_some_and(|n| n == f.name.as_str())
        }) else {
            continue;
        };
        if item.size() != wanted.raw_size {
            bail!(
                "{}: {} has {} bytes, expected {}",
                tarball.display(),
                wanted.name,
                item.size(),
                wanted.raw_size
            );
        }
        let target = dest.join(&wanted.name);
        item.unpack(&target)
            .with_context(|| format!("cannot write {}", target.display()))?;
        extracted += 1;
    }
    if extracted != entry.files.len() {
        bail!(
            "{}: found {extracted} of the {} expected files",
            tarball.display(),
            entry.files.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;

    /// A one-file HTTP server on 127.0.0.1 that answers `requests` requests, then stops.
    fn serve(body: Vec<u8>, requests: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(requests) {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        format!("http://{addr}/file.bin")
    }

    #[test]
    fn verified_download_lands() {
        let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let digest = manifest::sha256_hex(&body);
        let url = serve(body.clone(), 1);
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("file.bin");
        download(&url, &dest, &[digest], Some(body.len() as u64)).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), body);
    }

    #[test]
    fn wrong_checksum_keeps_nothing() {
        let url = serve(b"not the official bytes".to_vec(), 1);
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("file.bin");
        let err = download(&url, &dest, &["00".repeat(32)], None).unwrap_err();
        assert!(matches!(err, FetchError::Checksum { .. }), "{err}");
        assert!(err.to_string().contains("checksum mismatch"));
        assert!(!dest.exists());
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "no partial file left"
        );
    }

    #[test]
    fn wrong_size_is_reported() {
        let url = serve(b"short".to_vec(), 1);
        let tmp = tempfile::tempdir().unwrap();
        let err = download(&url, &tmp.path().join("f"), &[], Some(99)).unwrap_err();
        assert!(matches!(err, FetchError::Size { got: 5, .. }), "{err}");
    }

    #[test]
    fn unreachable_server_names_offline_routes() {
        // Bind then drop: nothing listens on this port any more.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let tmp = tempfile::tempdir().unwrap();
        let err = fetch_data(
            "fashion-mnist",
            Some(tmp.path().to_path_buf()),
            Some(&format!("http://127.0.0.1:{port}/")),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("apt-get install dataset-fashion-mnist"),
            "{err}"
        );
    }

    #[test]
    fn fetch_data_rejects_a_mirror_serving_other_bytes() {
        let url = serve(b"garbage".to_vec(), 1);
        let base = url.trim_end_matches("file.bin").to_string();
        let tmp = tempfile::tempdir().unwrap();
        let err = fetch_data("mnist", Some(tmp.path().to_path_buf()), Some(&base))
            .unwrap_err()
            .to_string();
        assert!(err.contains("train-images-idx3-ubyte.gz"), "{err}");
    }
}
