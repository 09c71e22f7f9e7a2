//! `kiln-remote serve`: host this machine's devices for remote clients with Burn's remote server
//! (WebSocket), and Kiln's link (the machine's fingerprint, pings) on the next port.

use std::net::{SocketAddr, TcpListener};

use burn::server::{RemoteServer, TokenAuthorizer, WebSocketTransport};
use clap::Parser;
use kiln_contract::{DeviceReport, ServeArgs, ServedBurn};
use kiln_core::Binding;

use crate::link;

/// The variable a token may come in instead of `--token` (it then stays out of `ps`).
pub use kiln_contract::REMOTE_TOKEN_VAR as TOKEN_VAR;

/// `kiln-remote serve`'s command line: the flags `cargo xtask serve` shares.
#[derive(Parser, Debug)]
#[command(
    name = "kiln-remote serve",
    about = "Host this machine's devices for Kiln's remote cells (`--device remote:ws://HOST:PORT`)"
)]
pub struct ServeCommand {
    #[command(flatten)]
    pub args: ServeArgs,
}

/// The bindings this build can serve, by name.
pub fn binding(name: &str) -> Option<&'static dyn Binding> {
    match name {
        "flex" => Some(&kiln_flex::FlexBinding),
        #[cfg(feature = "ndarray")]
        "ndarray" => Some(&kiln_ndarray::NdarrayBinding),
        #[cfg(feature = "wgpu")]
        "wgpu" => Some(&kiln_wgpu::WgpuBinding),
        #[cfg(feature = "cuda")]
        "cuda" => Some(&kiln_cuda::CUDA),
        #[cfg(feature = "rocm")]
        "rocm" => Some(&kiln_rocm::ROCM),
        _ => None,
    }
}

/// The backends [`binding`] knows, for messages.
fn servable() -> String {
    ["flex", "ndarray", "wgpu", "cuda", "rocm"]
        .into_iter()
        .filter(|name| binding(name).is_some())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Burns served beside this one, as `cargo xtask serve --burn A --burn B` lists them.
fn other_burns() -> Result<Vec<ServedBurn>, String> {
    let var = kiln_contract::REMOTE_OTHER_BURNS_VAR;
    match std::env::var(var) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| format!("{var}={text:?} is not a list of served Burns: {e}")),
        Err(_) => Ok(Vec::new()),
    }
}

/// Serve until the process is stopped (Ctrl+C or SIGTERM); `Err` says why it cannot start.
pub fn run(args: ServeArgs) -> Result<(), String> {
    let token = kiln_contract::remote_token(args.token.token.clone());
    if let Some(why) = kiln_contract::remote_bind_refusal(args.bind, token.as_deref()) {
        return Err(why);
    }
    let backend = args.backend()?;
    let binding = binding(backend).ok_or_else(|| {
        format!(
            "serve cannot host {:?}: this build serves {} (libtorch cannot host Burn's remote \
             sessions; cuda and rocm need `cargo xtask serve` on a machine with their driver)",
            backend,
            servable()
        )
    })?;
    let specs = if args.devices.devices.is_empty() {
        vec!["default".to_string()]
    } else {
        args.devices.devices.clone()
    };
    let probed = binding.probe();
    let mut devices = Vec::new();
    let mut reports = Vec::new();
    for spec in &specs {
        let selected = binding
            .device(spec)
            .map_err(|why| format!("{} device {spec}: {why}", binding.name()))?;
        let report = probed
            .iter()
            .find(|d| d.spec == selected.spec)
            .cloned()
            .unwrap_or_else(|| DeviceReport {
                spec: selected.spec.clone(),
                name: selected.name.clone(),
                kind: selected.kind,
                available: true,
                reason: None,
                precisions: kiln_core::device::supported_precisions(&selected.device),
                default: false,
                memory_bytes: None,
                runtime: selected.runtime.clone(),
            });
        reports.push(report);
        devices.push(selected.device);
    }
    let burn_addr = SocketAddr::new(args.bind, args.port);
    let next = args.port.checked_add(1).ok_or_else(|| {
        format!(
            "--port {}: Kiln's link needs the port after it; give a lower one",
            args.port
        )
    })?;
    let link_addr = SocketAddr::new(args.bind, next);
    let burn_listener = TcpListener::bind(burn_addr)
        .map_err(|e| format!("cannot listen on {burn_addr} for Burn's server: {e}"))?;
    let link_listener = TcpListener::bind(link_addr)
        .map_err(|e| format!("cannot listen on {link_addr} for Kiln's link: {e}"))?;
    let info = link::Info {
        backend: binding.name().into(),
        backend_version: binding.version().into(),
        devices: reports.clone(),
        fingerprint: kiln_machine::collect(binding.threads(), kiln_core::BURN_VERSION),
        other_burns: other_burns()?,
    };
    let link_token = token.clone();
    std::thread::spawn(move || link::serve(link_listener, info, link_token));

    let reach = if args.bind.is_loopback() {
        "this machine only (--bind 0.0.0.0 with --token serves the network)".to_string()
    } else {
        format!("every machine that reaches {}", args.bind)
    };
    for (i, d) in reports.iter().enumerate() {
        eprintln!("kiln: #{i}: {} {} ({})", binding.name(), d.spec, d.name);
    }
    eprintln!(
        "kiln: serving on ws://{burn_addr} (Burn's remote server) and {link_addr} (Kiln's \
         link), to {reach}; {}. Stop with Ctrl+C.",
        if token.is_some() {
            "clients must give the token"
        } else {
            "no token"
        }
    );
    // The line a script waits for: both ports are listening.
    println!("kiln-remote: serving ws://{burn_addr}");
    let mut server = RemoteServer::new(devices);
    if let Some(t) = token {
        server = server.with_authorizer(TokenAuthorizer::new(t).map_err(|e| e.to_string())?);
    }
    server
        .serve(WebSocketTransport::from_listener(burn_listener))
        .map_err(|e| format!("Burn's remote server stopped: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_backend_names_the_ones_served() {
        assert!(binding("flex").is_some());
        assert!(binding("tch").is_none());
        let served = servable();
        assert!(served.starts_with("flex"), "{served}");
        // ndarray and wgpu are served only by a build with their features (`cargo xtask serve
        // --backend wgpu`).
        assert_eq!(
            served.contains("ndarray"),
            cfg!(feature = "ndarray"),
            "{served}"
        );
        assert_eq!(served.contains("wgpu"), cfg!(feature = "wgpu"), "{served}");
    }
}
