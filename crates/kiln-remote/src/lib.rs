//! Kiln's remote devices: a cell trains here (the model, its autodiff graph and the optimizer
//! live in this process) while every tensor operation runs on a device another machine serves
//! with Burn's remote backend over WebSocket. `serve` hosts this machine's devices; Kiln's link
//! beside it tells a client which machine does the arithmetic and how far away it is.
//!
//! A remote device spec is `remote:ws://HOST:PORT[#INDEX]` (device `INDEX` of the ones the
//! server hosts, 0 by default); the token, when the server has one, comes from
//! `KILN_REMOTE_TOKEN` (`cargo xtask bench --token T` sets it for the runner).

use burn::prelude::*;
use burn::remote::{ConnectError, RemoteHost};
use kiln_contract::DeviceReport;
use kiln_core::Binding;
use kiln_core::device::Selected;

pub mod link;
pub mod serve;

pub use serve::TOKEN_VAR;

/// The variable that lists the remote devices `--probe` reports (comma-separated specs): how
/// `bench-all --device remote:...` plans cells on them.
pub use kiln_contract::REMOTE_DEVICES_VAR as DEVICES_VAR;

/// Reads of one float whose median is the sync time (after one).
const SYNCS: usize = 10;

/// A parsed `remote:ws://HOST:PORT[#INDEX]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// Burn's server (`ws://HOST:PORT`).
    pub url: String,
    /// Kiln's link (`HOST:PORT+1`).
    pub link: String,
    pub index: usize,
}

impl Spec {
    /// Parse a device spec, or say what one looks like.
    pub fn parse(spec: &str) -> Result<Spec, String> {
        let form = "a remote device is remote:ws://HOST:PORT or remote:ws://HOST:PORT#INDEX \
                    (the server's `cargo xtask serve --port PORT`)";
        let rest = spec
            .strip_prefix("remote:")
            .ok_or_else(|| format!("{spec:?}: {form}"))?;
        let (url, index) = match rest.split_once('#') {
            Some((url, i)) => (
                url,
                i.parse::<usize>()
                    .map_err(|_| format!("{spec:?}: device index {i:?} is not a number; {form}"))?,
            ),
            None => (rest, 0),
        };
        let hostport = url
            .strip_prefix("ws://")
            .ok_or_else(|| format!("{spec:?}: only ws:// servers are supported; {form}"))?
            .trim_end_matches('/');
        let (host, port) = hostport
            .rsplit_once(':')
            .filter(|(h, _)| !h.is_empty())
            .ok_or_else(|| format!("{spec:?}: no HOST:PORT; {form}"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{spec:?}: port {port:?} is not a port number; {form}"))?;
        let next = port
            .checked_add(1)
            .ok_or_else(|| format!("{spec:?}: Kiln's link needs the port after {port}"))?;
        Ok(Spec {
            url: format!("ws://{host}:{port}"),
            link: format!("{host}:{next}"),
            index,
        })
    }

    /// The same host and device index, at Burn server port `port`.
    fn at_port(&self, port: u16) -> Result<Spec, String> {
        let host = self
            .url
            .rsplit_once(':')
            .map_or(self.url.as_str(), |(h, _)| h);
        Spec::parse(&format!("remote:{host}:{port}#{}", self.index))
    }
}

/// Where a client built against Burn `own` trains, told `info` by the server at `spec`: there
/// (`None`) when that server runs `own`, else at the port where the same `serve` hosts `own`;
/// else why it cannot (Burn's remote protocol is each version's own).
pub fn route(spec: &Spec, info: &link::Info, own: &str) -> Result<Option<Spec>, String> {
    let theirs = &info.fingerprint.burn_version;
    if theirs == own {
        return Ok(None);
    }
    match info.other_burns.iter().find(|b| b.burn_version == own) {
        Some(served) => spec.at_port(served.port).map(Some),
        None => {
            let port = spec.url.rsplit_once(':').map_or("PORT", |(_, p)| p);
            Err(format!(
                "the server at {} runs Burn {theirs}, and this runner Burn {own}: each Burn \
                 speaks its own remote protocol. Serve both there, one server per Burn: `cargo \
                 xtask serve --backend {} --burn {theirs} --burn {own} --port {port}`",
                spec.url, info.backend
            ))
        }
    }
}

/// The server's token as this client has it.
fn token() -> Option<String> {
    kiln_contract::remote_token(None)
}

/// Kiln's link to the server of this runner's Burn at `spec` (`spec`'s own, or the one its
/// `serve` hosts beside it), that server's spec, what it says of itself, and the device.
fn reach(spec: &Spec) -> Result<(Spec, link::Client, link::Info, DeviceReport), String> {
    let ask = |spec: &Spec| -> Result<_, String> {
        let mut client = link::Client::connect(&spec.link)?;
        let info = client.info(token().as_deref())?;
        Ok((client, info))
    };
    let (mut client, mut info) = ask(spec)?;
    let mut spec = spec.clone();
    if let Some(other) = route(&spec, &info, kiln_core::BURN_VERSION)? {
        (client, info) = ask(&other)?;
        // The server named for this Burn must run it: no second hop.
        if info.fingerprint.burn_version != kiln_core::BURN_VERSION {
            return Err(format!(
                "the server at {} names {} as Burn {}'s, which runs Burn {}",
                spec.url,
                other.url,
                kiln_core::BURN_VERSION,
                info.fingerprint.burn_version
            ));
        }
        spec = other;
    }
    let device = info.devices.get(spec.index).cloned().ok_or_else(|| {
        format!(
            "the server at {} hosts {} device(s) (#0..#{}); #{} is not one",
            spec.url,
            info.devices.len(),
            info.devices.len().saturating_sub(1),
            spec.index
        )
    })?;
    Ok((spec, client, info, device))
}

/// Why Burn's server did not connect, in words a user can act on.
fn connect_error(url: &str, e: ConnectError) -> String {
    match e {
        ConnectError::Unauthorized => format!(
            "Burn's server at {url} refused the token (give the server's token with --token T \
             or {TOKEN_VAR})"
        ),
        other => format!("cannot open a session with Burn's server at {url}: {other}"),
    }
}

/// The median time to read back one float computed on `device`.
fn sync_seconds(device: &Device) -> Result<f64, String> {
    let one = Tensor::<1>::from_floats([1.0], device);
    link::median_seconds(SYNCS, || {
        let _ = (one.clone() + 1.0).into_data();
        Ok(())
    })
}

/// How a remote device appears in `--probe` and in row labels: `flex cpu (NAME) on HOST`.
fn describe(info: &link::Info, device: &DeviceReport) -> String {
    format!(
        "{} {} ({}) on {}",
        info.backend, device.spec, device.name, info.fingerprint.hostname
    )
}

/// Burn's remote backend, on the devices `cargo xtask serve` hosts elsewhere.
pub struct RemoteBinding;

impl Binding for RemoteBinding {
    fn name(&self) -> &'static str {
        "remote"
    }

    fn version(&self) -> &'static str {
        kiln_core::BURN_VERSION
    }

    /// The devices `KILN_REMOTE_DEVICES` names, each asked of its server (none without it).
    fn probe(&self) -> Vec<DeviceReport> {
        let listed = std::env::var(DEVICES_VAR).unwrap_or_default();
        listed
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|spec| match Spec::parse(spec).and_then(|s| reach(&s)) {
                Ok((_, _, info, device)) => DeviceReport {
                    spec: spec.to_string(),
                    name: describe(&info, &device),
                    default: true,
                    ..device
                },
                Err(why) => DeviceReport {
                    spec: spec.to_string(),
                    name: spec.to_string(),
                    kind: kiln_contract::DeviceKind::OtherGpu,
                    available: false,
                    reason: Some(why),
                    precisions: Vec::new(),
                    default: true,
                    memory_bytes: None,
                    runtime: None,
                },
            })
            .collect()
    }

    fn device(&self, spec: &str) -> Result<Selected, String> {
        if spec == "default" {
            return Err(format!(
                "the remote backend has no default device: name the server with --device \
                 remote:ws://HOST:PORT (`cargo xtask serve` there), or list them in {DEVICES_VAR}"
            ));
        }
        let (parsed, mut client, info, served) = reach(&Spec::parse(spec)?)?;
        let rtt = client.round_trip()?;
        let mut host = RemoteHost::websocket(&parsed.url);
        if let Some(t) = token() {
            host = host.with_credential(t);
        }
        let device = Device::remote_options(&host)
            .device_index(parsed.index)
            .init()
            .map_err(|e| connect_error(&parsed.url, e))?;
        let sync = sync_seconds(&device)?;
        Ok(Selected {
            device,
            spec: spec.to_string(),
            name: describe(&info, &served),
            kind: served.kind,
            runtime: served.runtime.clone(),
            remote: Some(kiln_contract::Remote {
                url: parsed.url,
                index: parsed.index,
                backend: info.backend,
                device: served.spec,
                device_name: served.name,
                fingerprint: info.fingerprint,
                rtt_seconds: rtt,
                sync_seconds: sync,
            }),
        })
    }

    fn threads(&self) -> usize {
        kiln_core::device::rayon_threads()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_and_without_an_index() {
        assert_eq!(
            Spec::parse("remote:ws://127.0.0.1:3000").unwrap(),
            Spec {
                url: "ws://127.0.0.1:3000".into(),
                link: "127.0.0.1:3001".into(),
                index: 0
            }
        );
        let s = Spec::parse("remote:ws://gpu.lan:7000/#2").unwrap();
        assert_eq!(
            (s.url.as_str(), s.link.as_str(), s.index),
            ("ws://gpu.lan:7000", "gpu.lan:7001", 2)
        );
        let v6 = Spec::parse("remote:ws://[::1]:3000").unwrap();
        assert_eq!(v6.link, "[::1]:3001");
    }

    #[test]
    fn bad_specs_say_what_a_spec_is() {
        for bad in [
            "ws://h:1",
            "remote:http://h:1",
            "remote:ws://h",
            "remote:ws://h:port",
            "remote:ws://h:1#x",
            "remote:ws://h:65535",
            "remote:ws://:1",
        ] {
            let why = Spec::parse(bad).unwrap_err();
            assert!(why.contains(bad), "{bad}: {why}");
        }
    }

    #[test]
    fn a_client_trains_on_its_own_burns_server_or_says_how_to_serve_it() {
        let info = |burn: &str, others: &[(&str, u16)]| link::Info {
            backend: "flex".into(),
            backend_version: burn.into(),
            devices: Vec::new(),
            fingerprint: kiln_contract::Fingerprint {
                burn_version: burn.into(),
                ..Default::default()
            },
            other_burns: others
                .iter()
                .map(|(v, port)| kiln_contract::ServedBurn {
                    burn_version: v.to_string(),
                    port: *port,
                })
                .collect(),
        };
        let spec = Spec::parse("remote:ws://gpu.lan:3000#1").unwrap();
        assert_eq!(route(&spec, &info("0.22.1", &[]), "0.22.1"), Ok(None));
        // The server of the other Burn, on its port, the same device index.
        let both = info("0.22.1", &[("0.23.0-pre.1", 3002)]);
        let other = route(&spec, &both, "0.23.0-pre.1").unwrap().unwrap();
        assert_eq!(
            (other.url.as_str(), other.link.as_str(), other.index),
            ("ws://gpu.lan:3002", "gpu.lan:3003", 1)
        );
        let v6 = Spec::parse("remote:ws://[::1]:3000").unwrap();
        let other = route(&v6, &both, "0.23.0-pre.1").unwrap().unwrap();
        assert_eq!(other.url, "ws://[::1]:3002");
        // A Burn it does not serve: the command that serves both.
        let why = route(&spec, &both, "0.24.0").unwrap_err();
        assert!(
            why.contains("runs Burn 0.22.1, and this runner Burn 0.24.0")
                && why.contains("--backend flex --burn 0.22.1 --burn 0.24.0 --port 3000"),
            "{why}"
        );
    }

    #[test]
    fn without_a_list_the_probe_reports_nothing_and_default_says_why() {
        if std::env::var_os(DEVICES_VAR).is_none() {
            assert!(RemoteBinding.probe().is_empty());
        }
        let Err(why) = RemoteBinding.device("default") else {
            panic!("a remote default device")
        };
        assert!(why.contains("remote:ws://"), "{why}");
    }
}
