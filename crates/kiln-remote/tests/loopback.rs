//! Remote devices on loopback: a flex server on 127.0.0.1 (`kiln-remote serve`), cells trained
//! on it through Burn's remote backend, compared with the same cells on local flex.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use burn::tensor::Device;
use kiln_contract::{CellRequest, DatasetName, Event, ModelKind, Profile, Record, Status};
use kiln_core::Binding;
use kiln_remote::RemoteBinding;

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kiln-remote"))
}

/// A port whose next port is free too (Burn's server and Kiln's link).
fn free_ports() -> u16 {
    loop {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        if port < u16::MAX && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

/// A `kiln-remote serve --backend flex` on loopback, killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(token: Option<&str>) -> Server {
        let port = free_ports();
        let mut cmd = runner();
        cmd.args(["serve", "--backend", "flex", "--port", &port.to_string()])
            .env_remove(kiln_contract::REMOTE_TOKEN_VAR)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(t) = token {
            cmd.env(kiln_contract::REMOTE_TOKEN_VAR, t);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.starts_with("kiln-remote: serving ws://") => break,
                Some(Ok(_)) => {}
                other => panic!("the server stopped before serving: {other:?}"),
            }
        }
        // Keep reading what the server prints, so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, port }
    }

    fn spec(&self) -> String {
        format!("remote:ws://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tiny synthetic cell: 64 samples, batch 16, two epochs, no calibration.
fn tiny(backend: &str, device: &str) -> CellRequest {
    let mut r = CellRequest::new(ModelKind::MnistCnn, backend, Profile::Quick);
    r.timing = kiln_contract::TimingRules::SETTLE_AT_ONCE;
    r.device = device.into();
    r.settings.epochs = 2;
    r.batch_size = 16;
    r.settings.budget_seconds = None;
    r.dataset = Some(DatasetName::Synthetic);
    r.settings.train_limit = Some(64);
    r.settings.eval_limit = Some(32);
    r.calibrate = false;
    r
}

/// The final record a runner printed.
fn final_record(stdout: &[u8]) -> Record {
    let text = String::from_utf8_lossy(stdout);
    text.lines()
        .filter_map(|l| serde_json::from_str::<Event>(l).ok())
        .find_map(|e| match e {
            Event::Final(r) => Some(*r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no final record in {text}"))
}

/// Run `r` with the remote runner, with `token` in its environment.
fn run_remote(r: &CellRequest, token: Option<&str>) -> (Record, String) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cell.json");
    r.write(&path).unwrap();
    let mut cmd = runner();
    cmd.arg("--cell")
        .arg(&path)
        .env_remove(kiln_contract::REMOTE_TOKEN_VAR);
    if let Some(t) = token {
        cmd.env(kiln_contract::REMOTE_TOKEN_VAR, t);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (final_record(&out.stdout), stderr)
}

#[test]
fn a_remote_step_agrees_with_local_flex_and_names_the_server() {
    let server = Server::start(None);
    let selected = RemoteBinding.device(&server.spec()).unwrap();
    let remote = selected
        .remote
        .clone()
        .expect("a remote device says where it is");
    assert_eq!(
        (remote.backend.as_str(), remote.device.as_str()),
        ("flex", "cpu")
    );
    assert_eq!(remote.url, format!("ws://127.0.0.1:{}", server.port));
    assert!(!remote.fingerprint.cpu_model.is_empty());
    assert!(
        remote.rtt_seconds > 0.0 && remote.sync_seconds > 0.0,
        "{remote:?}"
    );
    assert!(selected.name.starts_with("flex cpu ("), "{}", selected.name);
    let worst = kiln_core::check::agree(ModelKind::MnistCnn, &Device::flex(), &selected.device)
        .unwrap_or_else(|e| panic!("remote vs flex: {e}"));
    assert!(worst <= kiln_core::check::TOLERANCE, "{worst}");
}

#[test]
fn a_remote_cell_trains_as_the_local_flex_cell_does() {
    let server = Server::start(Some("s3cret"));
    let (remote, stderr) = run_remote(&tiny("remote", &server.spec()), Some("s3cret"));
    assert_eq!(remote.status, Status::Ok, "{:?}; {stderr}", remote.reason);
    assert_eq!(remote.backend, "remote");
    assert_eq!(remote.device, server.spec());
    let link = remote.remote.clone().expect("the record names the server");
    assert_eq!(link.backend, "flex");
    assert!(link.rtt_seconds > 0.0);
    let local = kiln_core::train_cell(&kiln_flex::FlexBinding, &tiny("flex", "cpu"), &mut |_| {});
    assert_eq!(local.status, Status::Ok, "{:?}", local.reason);
    assert!(local.remote.is_none());
    assert_eq!(remote.epochs.len(), local.epochs.len());
    for (r, l) in remote.epochs.iter().zip(&local.epochs) {
        let diff = (r.mean_loss - l.mean_loss).abs() / r.mean_loss.abs().max(l.mean_loss.abs());
        assert!(
            diff <= f64::from(kiln_core::check::TOLERANCE),
            "epoch {}: remote loss {} vs local {}",
            r.epoch,
            r.mean_loss,
            l.mean_loss
        );
    }
}

#[test]
fn a_wrong_or_missing_token_is_refused_clearly() {
    let server = Server::start(Some("s3cret"));
    for (token, expected) in [(Some("guess"), "wrong token"), (None, "needs a token")] {
        let (r, stderr) = run_remote(&tiny("remote", &server.spec()), token);
        assert_eq!(r.status, Status::Skipped, "{stderr}");
        let reason = r.reason.unwrap_or_default();
        assert!(reason.contains(expected), "{reason}");
        assert!(reason.contains("KILN_REMOTE_TOKEN"), "{reason}");
    }
}

#[test]
fn no_server_is_a_clear_skip() {
    let port = free_ports();
    let (r, _) = run_remote(
        &tiny("remote", &format!("remote:ws://127.0.0.1:{port}")),
        None,
    );
    assert_eq!(r.status, Status::Skipped);
    let reason = r.reason.unwrap_or_default();
    assert!(reason.contains("cargo xtask serve"), "{reason}");
}

#[test]
fn a_server_killed_mid_cell_fails_the_cell() {
    let mut server = Server::start(None);
    let mut r = tiny("remote", &server.spec());
    r.settings.epochs = 50;
    r.settings.train_limit = Some(512);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cell.json");
    r.write(&path).unwrap();
    let mut child = runner()
        .arg("--cell")
        .arg(&path)
        .env_remove(kiln_contract::REMOTE_TOKEN_VAR)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Wait until training has begun, then stop the server under it.
    let mut lines = Vec::new();
    let started = Instant::now();
    while !lines.iter().any(|l: &String| l.contains("\"epoch\"")) {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(l) => lines.push(l),
            Err(e) => panic!("no training event in time ({e}): {lines:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(180), "{lines:?}");
    }
    let _ = server.child.kill();
    let _ = server.child.wait();
    // The runner ends with a failed record, in bounded time.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the runner hung after its server died");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    lines.extend(rx.try_iter());
    let record = final_record(lines.join("\n").as_bytes());
    assert_eq!(
        record.status,
        Status::Failed,
        "{:?} ({status})",
        record.reason
    );
    assert!(record.remote.is_some());
}

#[test]
fn serve_refuses_an_open_address_without_a_token() {
    let out = runner()
        .args([
            "serve",
            "--backend",
            "flex",
            "--bind",
            "0.0.0.0",
            "--port",
            "1",
        ])
        .env_remove(kiln_contract::REMOTE_TOKEN_VAR)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to serve on 0.0.0.0 without a token"),
        "{stderr}"
    );
}

/// The resident memory of a process, in bytes (Linux).
fn rss_bytes(pid: u32) -> u64 {
    kiln_machine::process::current_rss_bytes(Some(pid)).expect("the server's VmRSS")
}

/// Burn's WebSocket server, fed garbage, a bad handshake, a frame that claims 2^40 bytes and
/// 200 idle connections, keeps training a valid client's cell, under twice its idle memory:
/// its memory once two valid cells have trained (a second clean session alone nearly doubles
/// the first's, in the allocator's pools: docs/remote.md).
#[test]
fn burns_port_survives_garbage_and_keeps_serving_with_bounded_memory() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let server = Server::start(None);
    for _ in 0..2 {
        let (warm, stderr) = run_remote(&tiny("remote", &server.spec()), None);
        assert_eq!(warm.status, Status::Ok, "{stderr}");
    }
    let idle = rss_bytes(server.child.id());
    let addr = ("127.0.0.1", server.port);
    let send = |bytes: &[u8]| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(bytes);
        let mut answer = Vec::new();
        let _ = s.take(4096).read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    };
    // Not HTTP at all, then HTTP that is no WebSocket handshake.
    send(b"\x00\xff\x13garbage that is not HTTP\r\n\r\n");
    send(b"GET /session HTTP/1.1\r\nHost: x\r\n\r\n");
    // A valid handshake, then a binary frame whose header claims 2^40 bytes of payload.
    let mut frame = vec![0x82u8, 0xff];
    frame.extend_from_slice(&(1u64 << 40).to_be_bytes());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(&[0xab; 4096]);
    let mut handshake = b"GET /session HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n\
        Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Sec-WebSocket-Version: 13\r\n\r\n"
        .to_vec();
    handshake.extend_from_slice(&frame);
    send(&handshake);
    // Idle connections held open while a valid client trains.
    let idle_conns: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    let (again, stderr) = run_remote(&tiny("remote", &server.spec()), None);
    assert_eq!(again.status, Status::Ok, "{stderr}");
    let held = rss_bytes(server.child.id());
    drop(idle_conns);
    assert!(
        held < 2 * idle.max(1),
        "Burn's server grew from {idle} to {held} bytes under abuse"
    );
}
